"""The sequence-reversal study's reports, over run records: outcome pages (``report``, over the
runs and numbers of ``runs``) and long runs' training traces (``trajectories``); what a run's
curves say is ``traces``'. A plan's ``pages:`` section selects them (``report: reversal |
trajectories``, ``studies.sweep``); its runs are trained by the sweep.
"""
