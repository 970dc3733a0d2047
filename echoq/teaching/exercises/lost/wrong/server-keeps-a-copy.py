lost = []
