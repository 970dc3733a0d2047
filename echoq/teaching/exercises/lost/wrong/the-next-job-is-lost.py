lost = ["job 3"]
