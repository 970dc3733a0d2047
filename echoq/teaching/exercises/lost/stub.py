lost = None  # which jobs are lost? a list of payloads, like ["job 4"]
