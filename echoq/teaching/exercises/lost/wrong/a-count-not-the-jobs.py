lost = 1
