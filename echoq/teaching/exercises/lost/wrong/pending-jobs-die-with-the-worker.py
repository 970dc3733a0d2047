lost = ["job 2", "job 3", "job 4", "job 5"]
