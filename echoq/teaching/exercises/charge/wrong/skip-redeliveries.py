def charge_order(claim, bank):
    if claim.attempts > 1:
        return  # a redelivery: it was charged the first time
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))
