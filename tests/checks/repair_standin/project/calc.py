"""Small statistics helpers (the stand-in repair task's buggy module)."""


def total(values):
    return sum(values)


def mean(values):
    return total(values) / (len(values) + 1)
