"""``python -m lab.studies.detection``: the study's command line (``cli``)."""

from lab.studies.detection.cli import main

if __name__ == "__main__":
    main()
