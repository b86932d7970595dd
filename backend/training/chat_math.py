"""Arithmetic word problems for the chat training corpus: sixteen kinds (change at a shop, unit prices,
travel times, discounts, ratios, averages, geometry, equations, fractions, two unknowns, savings,
work rates, probability, recipes, percentages, elapsed time), each drawn many times with a seeded
`random.Random` so numbers, names and items vary and the set is the same on every run.

The numbers are chosen so every problem has a clean answer (whole people, a bill larger than
the total). The names and items come from chat_lists.json (our own words). Knows nothing about models or
about who answers the problems.
"""

from __future__ import annotations

import random
from collections.abc import Callable

PER_KIND = 26  # problems drawn of each kind (repeats are dropped later)
STEPS = (
    "Show your steps.",
    "Show your working.",
    "Show each step.",
    "Explain your steps.",
    "Show how you worked it out.",
    "Explain how you got the answer.",
)


def math_problems(rng: random.Random, lists: dict) -> list[tuple[str, str]]:
    """(kind, problem text ending with a request for the steps); names and items come from `lists`."""
    problems = []
    for kind in KINDS:
        for _ in range(PER_KIND):
            problems.append((kind.__name__.strip("_"), f"{kind(rng, lists)} {rng.choice(STEPS)}"))
    return problems


def _money(rng: random.Random, low: float, high: float) -> float:
    return round(rng.randint(int(low * 20), int(high * 20)) / 20, 2)  # multiples of 5 cents


def _change(rng: random.Random, lists: dict) -> str:
    first, second = rng.sample(lists["foods"], 2)
    price_1, price_2 = _money(rng, 0.5, 4.5), _money(rng, 0.5, 4.5)
    count_1, count_2 = rng.randint(2, 8), rng.randint(2, 8)
    total = price_1 * count_1 + price_2 * count_2
    bill = next(b for b in (10, 20, 50, 100) if b > total)
    name = rng.choice(lists["names"])
    return (
        f"A shop sells {first} for ${price_1:.2f} each and {second} for ${price_2:.2f} each. {name} buys "
        f"{count_1} {first} and {count_2} {second} and pays with a ${bill} bill. How much change does {name} get?"
    )


def _unit_price(rng: random.Random, lists: dict) -> str:
    item = rng.choice(lists["foods"])
    small, factor = rng.randint(3, 8), rng.randint(2, 4)
    price_small = _money(rng, 2, 9)
    price_big = round(price_small * factor * rng.uniform(0.8, 1.1), 2)
    return (
        f"A pack of {small} {item} costs ${price_small:.2f} and a pack of {small * factor} costs "
        f"${price_big:.2f}. Which pack is the better deal per item, and by how much?"
    )


def _travel(rng: random.Random, lists: dict) -> str:
    speed, quarters = rng.randint(40, 110), rng.randint(3, 16)
    distance = speed * quarters / 4
    hour, minute = rng.randint(6, 15), rng.choice(range(0, 60, 5))
    name = rng.choice(lists["names"])
    return (
        f"{name} leaves {rng.choice(lists['towns'])} at {hour}:{minute:02d} and drives {distance:g} km at an "
        f"average speed of {speed} km per hour. At what time does {name} arrive?"
    )


def _discount(rng: random.Random, lists: dict) -> str:
    price, first, extra = rng.randint(20, 300), rng.choice((10, 15, 20, 25, 30, 40)), rng.choice((5, 10, 15, 20))
    product = rng.choice(lists["products"])
    return (
        f"A {product} costs ${price}. The shop takes {first}% off, and then an extra {extra}% off the sale price. "
        f"What is the final price? Is that the same as {first + extra}% off the original price?"
    )


def _ratio(rng: random.Random, lists: dict) -> str:
    a, b = rng.sample(range(1, 9), 2)
    amount = a * rng.randint(20, 90)
    name = rng.choice(lists["names"])
    return (
        f"A paint colour mixes blue and white in the ratio {a} : {b}. If {name} uses {amount} ml of blue, how "
        f"much white is needed, and how much paint is there in total?"
    )


def _average(rng: random.Random, lists: dict) -> str:
    scores = [rng.randint(60, 98) for _ in range(rng.randint(3, 5))]
    target = round(sum(scores) / len(scores)) + rng.randint(1, 5)
    name = rng.choice(lists["names"])
    listed = ", ".join(map(str, scores[:-1])) + f" and {scores[-1]}"
    return (
        f"{name} scored {listed} on the first {len(scores)} quizzes. What score does {name} need on the next "
        f"quiz to have an average of exactly {target}?"
    )


def _rectangle(rng: random.Random, lists: dict) -> str:
    width, times, more = rng.randint(3, 20), rng.randint(2, 3), rng.randint(1, 9)
    perimeter = 2 * (width + times * width + more)
    place = rng.choice(("field", "playground", "pond", "car park", "vegetable patch", "room"))
    return (
        f"The length of a rectangular {place} is {more} metres more than {times} times its width. Its perimeter "
        f"is {perimeter} metres. Find the length, the width and the area."
    )


def _equation(rng: random.Random, lists: dict) -> str:
    x, a, b, c = rng.randint(-6, 12), rng.randint(2, 7), rng.randint(1, 9), rng.randint(-9, 9)
    d = rng.choice([n for n in range(1, 6) if n != a])
    e = a * (x - b) + c - d * x
    left = f"{a}(x - {b}) {'+' if c >= 0 else '-'} {abs(c)}"
    right = f"{d}x {'+' if e >= 0 else '-'} {abs(e)}"
    return f"Solve for x: {left} = {right}."


def _fractions(rng: random.Random, lists: dict) -> str:
    (p, q), (r, s), (t, u) = [(rng.randint(1, d - 1), d) for d in rng.sample((2, 3, 4, 5, 6, 8, 10, 12), 3)]
    return f"Work out {p}/{q} + {r}/{s} - {t}/{u}. Give the answer as a fraction in its simplest form."


def _two_unknowns(rng: random.Random, lists: dict) -> str:
    adults, children = rng.randint(5, 60), rng.randint(5, 60)
    adult_price, child_price = rng.randint(8, 20), rng.randint(3, 7)
    event, total = rng.choice(lists["events"]), adults * adult_price + children * child_price
    return (
        f"For {event}, {adults + children} tickets were sold for a total of ${total}. "
        f"Adult tickets cost ${adult_price} and child tickets ${child_price}. How many of each were sold?"
    )


def _savings(rng: random.Random, lists: dict) -> str:
    weekly, have = rng.randint(5, 40), rng.randint(0, 100)
    goal = have + weekly * rng.randint(4, 30) - rng.randint(0, weekly - 1)
    name, product = rng.choice(lists["names"]), rng.choice(lists["products"])
    return (
        f"{name} wants to buy a {product} for ${goal}. {name} has ${have} already and saves ${weekly} every "
        f"week. After how many weeks can {name} buy it?"
    )


def _work_rate(rng: random.Random, lists: dict) -> str:
    first, second = rng.sample(lists["names"], 2)
    hours_1, hours_2 = rng.sample(range(2, 13), 2)
    task = rng.choice(
        ("paint a fence", "tidy the garden", "sort the library books", "clean the hall", "pack the boxes")
    )
    return (
        f"{first} can {task} alone in {hours_1} hours, and {second} can do it alone in {hours_2} hours. "
        f"How long does it take them working together?"
    )


def _probability(rng: random.Random, lists: dict) -> str:
    colours = rng.sample(("red", "blue", "green", "yellow", "white", "black"), 3)
    counts = [rng.randint(2, 8) for _ in colours]
    bag = ", ".join(f"{n} {c}" for n, c in zip(counts, colours, strict=True))
    target = rng.choice(colours)
    return (
        f"A box holds {bag} beads. Two beads are taken out one after the other without putting the first back. "
        f"What is the probability that both are {target}?"
    )


def _recipe(rng: random.Random, lists: dict) -> str:
    people, wanted, grams = rng.choice((2, 4, 6)), rng.randint(3, 12), 50 * rng.randint(2, 12)
    food = rng.choice(("flour", "rice", "pasta", "lentils", "oats", "sugar", "butter", "cheese"))
    return f"A recipe for {people} people uses {grams} g of {food}. How much {food} is needed for {wanted} people?"


def _percentage(rng: random.Random, lists: dict) -> str:
    total, percent = 10 * rng.randint(2, 12), rng.choice((10, 15, 20, 25, 30, 35, 40, 45, 60, 75))
    job = rng.choice(lists["jobs"])
    return (
        f"A company has {total} employees and {percent}% of them work as a {job}. How many is that, and how "
        f"many employees have another job?"
    )


def _elapsed(rng: random.Random, lists: dict) -> str:
    hour, minute, length = rng.randint(13, 21), rng.choice(range(0, 60, 5)), rng.randint(75, 190)
    return (
        f"A film starts at {hour}:{minute:02d} and lasts {length} minutes, with a 15-minute break in the "
        f"middle. At what time does it end?"
    )


KINDS: tuple[Callable[[random.Random, dict], str], ...] = (
    _change,
    _unit_price,
    _travel,
    _discount,
    _ratio,
    _average,
    _rectangle,
    _equation,
    _fractions,
    _two_unknowns,
    _savings,
    _work_rate,
    _probability,
    _recipe,
    _percentage,
    _elapsed,
)
