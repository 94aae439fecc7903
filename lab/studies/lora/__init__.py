"""The LoRA study (peft): a base adapted to shifted domains by full fine-tuning and LoRA at every
rank, over seeds, against the student's table (``python -m lab.studies.lora``;
``cli`` says what each part and module does).
"""
