"""``python -m lab.studies.warm_start run ...``."""

from lab.studies.warm_start.cli import main

if __name__ == "__main__":
    main()
