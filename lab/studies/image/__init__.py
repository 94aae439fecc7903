"""The image-generation study: its runs are plans (``configs/studies/image*.yaml``), their pages'
``paired`` report kind is ``results.paired.write_paired``, and ``samples`` draws PNG grids of a
trained checkpoint."""
