import echoq

r = echoq.connect()

def charge_order(claim, bank):
    done = f"charged:{claim.job_id}"
    if r.exists(done):
        return
    card, cents = claim.payload.split()
    bank.charge(card, int(cents))
    r.set(done, 1, ex=600)
