lost = {"job 2"}
