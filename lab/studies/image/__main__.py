"""``python -m lab.studies.image``: the study's command line (``cli``)."""

from lab.studies.image.cli import main

if __name__ == "__main__":
    main()
