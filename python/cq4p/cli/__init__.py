"""`python -m cq4p` and the commands it runs."""
