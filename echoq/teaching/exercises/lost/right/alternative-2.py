lost = ("job " + str(2),)
