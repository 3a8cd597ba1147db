"""Pipeline: PT segments and the multiprocessing decoder."""
