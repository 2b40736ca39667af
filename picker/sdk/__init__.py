"""The embedded SDK: an online ``Controller`` a serving loop consults every step (``controller``),
the plan it starts from (``plan``), and a drafter that follows it (``drafter``).
"""
