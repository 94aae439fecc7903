"""The LoRA study (peft): a base adapted to shifted domains by full fine-tuning and LoRA at every
rank, over seeds, against the student's table. Its runs are the plans
``configs/studies/lora.yaml`` and ``lora_mnist5k.yaml``; this package is its report kind ``lora``.
"""
