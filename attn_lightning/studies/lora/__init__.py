"""The LoRA study (peft): a base adapted to shifted domains by full fine-tuning and LoRA at every
rank, over seeds, against the student's table (``python -m attn_lightning.studies.lora
mlp|variants|transformer|lrsweep|report``).

``cli`` is the command line; ``jobs`` and ``lrsweep`` plan each part's runs; ``runs`` runs them
through ``studies.runner`` and commits each finished one as a run record under
``docs/results/<out>/runs/<part>/``; ``report`` and ``lrsweep_report`` write the tables from those
records.
"""
