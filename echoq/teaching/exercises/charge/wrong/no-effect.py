def charge_order(claim, bank):
    pass
