"""The warm-start study: a softmax model's weights under efficient attention (Performer's
backward compatibility), zero-shot, fine-tuned and against training from scratch."""

from lab.studies.warm_start.cli import main

__all__ = ["main"]
