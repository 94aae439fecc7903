"""Deprecated: ``python -m attn_lightning.studies.reversal_report ARGS`` is
``python -m attn_lightning.studies.reversal report ARGS``; this alias says so and runs it."""

import sys
import warnings

from attn_lightning.studies.reversal.cli import main

if __name__ == "__main__":
    warnings.warn(
        "python -m attn_lightning.studies.reversal_report is deprecated; "
        "use python -m attn_lightning.studies.reversal report",
        FutureWarning,
        stacklevel=2,  # the caller (runpy): the notice is one line, with no source line
    )
    main(["report", *sys.argv[1:]])
