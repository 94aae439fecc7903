"""``python -m lab.studies.lora mlp|variants|transformer|lrsweep|report``."""

from lab.studies.lora.cli import main

if __name__ == "__main__":
    main()
