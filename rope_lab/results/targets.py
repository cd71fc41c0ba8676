"""Where commands may write: a run directory only into a new, empty or run folder, an output
file never over a folder nor into the results it was computed from.

A run directory (`sweep run`, `train --out`) only ever adds files under `trials/` and a few of
its own beside it, so an existing run directory is resumed; a folder of anything else (a
user's notes, a corpus, a checkpoint) is refused before any work starts, so results never mix
with files rope_lab did not write. An output file (`results --output`, `claims --output`,
`loss-law --output`, `plot --out`) replaces what its path names, which must not be a folder or
a file under the `trials/` of a run directory it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rope_lab.results.scan import is_run_dir
from rope_lab.typed import ConfigError


class TargetError(ConfigError):
    """An output path a command refuses to write, named with the reason."""


def _listing(folder: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def check_run_target(run_dir: str | Path, option: str = "--out") -> None:
    """TargetError unless `run_dir` is new, an empty folder or a run directory (it holds
    `trials/`): a regular file or a folder of other files is refused, naming what it holds."""
    path = Path(run_dir)
    if not path.exists() or is_run_dir(path):
        return
    if not path.is_dir():
        raise TargetError(f"{option}: {path} is a file, not a run directory; choose a new folder")
    if any(path.iterdir()):
        raise TargetError(
            f"{option}: {path} holds {_listing(path)} and is not a run directory (no trials/ "
            "folder); rope-lab writes a run only into a new or empty folder or a run directory"
        )


def check_output_file(
    path: str | Path, sources: Sequence[str | Path] = (), option: str = "--output"
) -> Path:
    """`path` with its parent folder created; TargetError when it names a folder, or a file
    inside the `trials/` of one of the run directories `sources` (the results being read)."""
    out = Path(path)
    if out.is_dir():
        raise TargetError(f"{option}: {out} is a folder; give the path of a file to write")
    resolved = out.resolve()
    for source in sources:
        trials = (Path(source) / "trials").resolve()
        if resolved.is_relative_to(trials):
            raise TargetError(
                f"{option}: {out} is inside {Path(source) / 'trials'}, the results this command "
                "reads; write it elsewhere"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    return out
