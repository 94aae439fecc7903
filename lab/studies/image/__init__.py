"""The image-generation study: its runs are plans (``configs/studies/image*.yaml``); ``tables`` is
their pages' ``paired`` report kind and ``samples`` draws PNG grids of a trained checkpoint."""
