def handle(claim, bank):
    pass
