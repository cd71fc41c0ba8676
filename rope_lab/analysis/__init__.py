"""Reading results: queries (`query`, polars), curve labels, fits and loss laws, figures (`plots/`)
and published claims judged on runs (`claims/`). Nothing here imports JAX."""
