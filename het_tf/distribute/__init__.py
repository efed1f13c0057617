"""Distribution: the task servers and strategy from TF_CONFIG, and hybrid
mode's Horovod connection to the PS tasks."""
