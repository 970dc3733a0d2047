import echoq

r = echoq.connect()

def charge_order(claim, bank):
    if not r.set(f"charged:{claim.job_id}", 1, nx=True, ex=600):
        return  # someone charged it already
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))
