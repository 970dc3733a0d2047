lost = ["job 1", "job 2"]
