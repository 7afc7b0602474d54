"""Paid crowd studies (Prolific and platforms like it): a study link in, consent, an annotator account bound
to the participant's platform id, a completion code out, and bonuses that match the work."""
