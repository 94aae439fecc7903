"""The warm-start study: a softmax model's weights under efficient attention (Performer's
backward compatibility), zero-shot, fine-tuned and against training from scratch. Its runs are
the stages of ``configs/studies/warm_start_{reversal,digits}.yaml``; ``tables`` is its page's
``warm_start`` report kind."""
