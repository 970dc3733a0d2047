lost = ["job 2"]  # only the job in the worker's hands; the finished one is done, the rest wait
