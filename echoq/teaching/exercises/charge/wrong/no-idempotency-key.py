def charge_order(claim, bank):
    card, cents = claim.payload.split()
    amount = int(cents)
    bank.charge(card, amount)
