#!/usr/bin/env python3
"""Writes datasets/default_calibration.txt, kvcal's default calibration text.

The text is datasets/calibration_handwritten.txt (prose written for this
project) followed by documents this script composes from its own templates
and word lists, all written for kvcal: stories and fables, chat transcripts,
letters and notes, manuals and explanations, source code in several
languages, configuration files and logs, lists, tables, worked arithmetic,
and short passages in nineteen languages. Nothing is taken from any other
text or corpus. Documents are separated by blank lines (one document is a
run of non-blank lines, as kvcal reads plain text).

The output is a function of this file alone: a fixed seed drives a
splitmix64 generator of the script's own (no dependence on Python's random
module), so every run writes the same bytes.

Usage:
  python3 datasets/make_default_calibration.py            # rewrite the file
  python3 datasets/make_default_calibration.py --check    # exit 1 if it differs
"""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HANDWRITTEN = os.path.join(HERE, "calibration_handwritten.txt")
OUTPUT = os.path.join(HERE, "default_calibration.txt")
SEED = 20261201
TARGET_BYTES = 1_200_000  # about 400k tokens of a 32k-50k vocabulary

# --- a deterministic generator ------------------------------------------------------

M64 = (1 << 64) - 1


class Rng:
    """splitmix64: small, fast, and the same on every Python."""

    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n

    def randint(self, a, b):
        return a + self.below(b - a + 1)

    def uniform(self, a, b):
        return a + (b - a) * (self.next() >> 11) / float(1 << 53)

    def chance(self, p):
        return self.uniform(0.0, 1.0) < p

    def choice(self, seq):
        return seq[self.below(len(seq))]

    def shuffle(self, seq):
        for i in range(len(seq) - 1, 0, -1):
            j = self.below(i + 1)
            seq[i], seq[j] = seq[j], seq[i]

    def sample(self, seq, k):
        s = list(seq)
        self.shuffle(s)
        return s[:k]


def cap(s):
    return s[:1].upper() + s[1:]


def join_and(items):
    items = list(items)
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def num_word(n):
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
             "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen",
             "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
    tens = {20: "twenty", 30: "thirty", 40: "forty", 50: "fifty", 60: "sixty",
            70: "seventy", 80: "eighty", 90: "ninety"}
    if n <= 20:
        return words[n]
    if n < 100:
        t = n - n % 10
        return tens[t] + ("" if n % 10 == 0 else "-" + words[n % 10])
    return str(n)


def plural(n, one, many=None):
    return "%d %s" % (n, one if n == 1 else (many or one + "s"))


def clock(minutes):
    minutes %= 24 * 60
    return "%02d:%02d" % (minutes // 60, minutes % 60)


def money(x):
    return "%.2f" % x


# --- word lists (written for this script) ------------------------------------------

WOMEN = ["Amara", "Beatrix", "Chiara", "Dalia", "Elif", "Farah", "Greta", "Hana", "Ines",
         "Jun", "Kalinda", "Leila", "Marta", "Nadia", "Oona", "Priya", "Quinn", "Rosa",
         "Saoirse", "Tamsin", "Ulla", "Valentina", "Wen", "Ximena", "Yasmin", "Zofia",
         "Aiko", "Bronwen", "Carmen", "Dagny", "Esther", "Fatima", "Gulnara", "Hedda",
         "Ingrid", "Joanna", "Keiko", "Lucia", "Mei", "Noor", "Olga", "Paloma", "Rania",
         "Sigrid", "Thandi", "Uma", "Vera", "Wanjiru", "Yuki", "Zainab", "Ada", "Mira",
         "Lena", "Nell", "Iris", "Maud", "Ruth", "Clara", "June", "Tess"]
MEN = ["Abel", "Bruno", "Casimir", "Dario", "Emeka", "Felix", "Goran", "Hamid", "Ivo",
       "Jonas", "Kenji", "Luca", "Mateo", "Nikolai", "Omar", "Pavel", "Quentin", "Rafael",
       "Sami", "Tomas", "Ugo", "Viktor", "Wim", "Xavier", "Yusuf", "Zoltan", "Anders",
       "Bashir", "Cormac", "Dmitri", "Elias", "Farid", "Gideon", "Hugo", "Ilya", "Jarrah",
       "Kofi", "Lars", "Malik", "Nils", "Oskar", "Pietro", "Rohan", "Stellan", "Tariq",
       "Arjun", "Bram", "Cyril", "Dev", "Ezra", "Finn", "Gus", "Hector", "Ian", "Joe",
       "Ken", "Leo", "Max", "Ned", "Otto"]
SURNAMES = ["Abara", "Bergstrom", "Castellano", "Dimitriou", "Eriksen", "Fontaine",
            "Gallagher", "Haddad", "Ishikawa", "Jovanovic", "Kowalski", "Lindqvist",
            "Mensah", "Novak", "Okafor", "Petrov", "Quispe", "Rahman", "Silva", "Tanaka",
            "Underwood", "Varga", "Whitlock", "Xu", "Yilmaz", "Zhou", "Alvarez", "Brennan",
            "Chowdhury", "Delacroix", "Esposito", "Fischer", "Gonzaga", "Holm", "Ivanova",
            "Jensen", "Kaur", "Lopez", "Moreau", "Nakamura", "Oyelaran", "Pham", "Rossi",
            "Sato", "Thorne", "Ueda", "Vasquez", "Weber", "Yamada", "Zeller", "Marsh",
            "Penrose", "Hollis", "Arden", "Blythe", "Carver", "Dunmore", "Ellery"]
TOWN_A = ["Ash", "Bram", "Cor", "Dun", "Elm", "Fen", "Gar", "Har", "Ivy", "Kel", "Lin",
          "Mar", "Nor", "Oak", "Pem", "Quar", "Ros", "Sal", "Tor", "Ul", "Ver", "Wes",
          "Yar", "Zel", "Bel", "Crow", "Dray", "Frost", "Glen", "Holl", "Kings", "Lark",
          "Mill", "North", "Pine", "Red", "Stone", "Thorn", "Wil", "Wren"]
TOWN_B = ["ford", "by", "wick", "mouth", "dale", "field", "haven", "stead", "bridge",
          "moor", "ton", "brook", "holm", "cliff", "well", "gate", "combe", "ley", "mere",
          "thwaite", "ness", "hurst", "bury", "port"]
RIVERS = ["the Aller", "the Brisk", "the Calder", "the Dunlin", "the Esk", "the Fallow",
          "the Greave", "the Hollin", "the Isel", "the Kestle", "the Lune", "the Marrow",
          "the Nene", "the Orrin", "the Pell", "the Quill", "the Rye", "the Swale"]
PLACES = ["the bakery", "the library", "the harbour", "the train station",
          "the market square", "the post office", "the swimming pool", "the museum",
          "the hardware shop", "the bus depot", "the clinic", "the school",
          "the town hall", "the bicycle repair shop", "the community garden",
          "the observatory", "the ferry terminal", "the old mill", "the weather station",
          "the bookshop", "the fire station", "the laundrette", "the allotments",
          "the night market", "the repair café", "the radio station", "the glassworks",
          "the printing works", "the tram shed", "the orchard", "the boatyard",
          "the lighthouse", "the greenhouse", "the cheese shop", "the archive"]
JOBS = [("baker", "an"), ("engineer", "an"), ("librarian", "a"), ("nurse", "a"),
        ("ferry pilot", "a"), ("clockmaker", "a"), ("teacher", "a"), ("carpenter", "a"),
        ("beekeeper", "a"), ("translator", "a"), ("bus driver", "a"), ("gardener", "a"),
        ("locksmith", "a"), ("radio operator", "a"), ("cartographer", "a"),
        ("potter", "a"), ("electrician", "an"), ("postal worker", "a"),
        ("piano tuner", "a"), ("chemist", "a"), ("shepherd", "a"), ("tailor", "a"),
        ("baker's apprentice", "a"), ("night watchman", "a"), ("glassblower", "a"),
        ("surveyor", "a"), ("archivist", "an"), ("fisher", "a"), ("mechanic", "a"),
        ("painter", "a"), ("cook", "a"), ("programmer", "a"), ("bookbinder", "a"),
        ("violin maker", "a"), ("lock keeper", "a"), ("park ranger", "a")]
SEASONS = ["spring", "summer", "autumn", "winter"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
DAY_PARTS = ["morning", "afternoon", "evening", "night"]
OBJECTS = ["a brass compass", "a wooden box", "a notebook with a green cover",
           "a broken umbrella", "a jar of buttons", "an old radio", "a map of the coast",
           "a silver key", "a bicycle bell", "a tin of seeds", "a pocket watch",
           "a folded letter", "a ball of red wool", "a cracked teapot", "a paper kite",
           "a telescope", "a bag of apples", "a lantern", "a chess set with one pawn missing",
           "a photograph of a bridge", "a violin case", "a jar of honey", "a clay bowl",
           "a stack of postcards", "a spare wheel", "a feather", "a set of keys",
           "a loaf of rye bread", "a hand-drawn map", "a music box"]
ANIMALS = [("fox", "she"), ("badger", "he"), ("hare", "she"), ("owl", "he"),
           ("heron", "she"), ("otter", "he"), ("mouse", "she"), ("crow", "he"),
           ("tortoise", "she"), ("squirrel", "he"), ("goat", "she"), ("hedgehog", "he"),
           ("sparrow", "she"), ("bear", "he"), ("wolf", "she"), ("duck", "he"),
           ("cat", "she"), ("dog", "he"), ("frog", "she"), ("beaver", "he")]
FOODS = ["soup", "bread", "apple cake", "rice", "lentil stew", "pancakes", "dumplings",
         "porridge", "fish pie", "noodles", "flatbread", "plum jam", "roast potatoes",
         "bean salad", "cheese", "tomato sauce", "fried eggs", "mushroom risotto"]
COLORS = ["red", "blue", "green", "yellow", "grey", "white", "black", "orange", "brown",
          "purple", "silver", "pale blue", "dark green", "golden"]
WEATHER = ["the rain came down in long grey sheets", "a cold wind blew in from the sea",
           "the sun was already warm on the rooftops", "fog lay thick along the river",
           "snow had fallen quietly during the night", "the sky was a clean, hard blue",
           "thunder rolled somewhere beyond the hills", "a light drizzle hung in the air",
           "the first frost had whitened the fields", "the heat pressed down on the streets"]


def person(r, gender=None):
    g = gender or r.choice(["f", "m"])
    name = r.choice(WOMEN if g == "f" else MEN)
    if g == "f":
        pro = {"she": "she", "her": "her", "hers": "her", "self": "herself"}
    else:
        pro = {"she": "he", "her": "him", "hers": "his", "self": "himself"}
    return name, pro, g


def town(r):
    return r.choice(TOWN_A) + r.choice(TOWN_B)


def job(r):
    j, a = r.choice(JOBS)
    return j, a + " " + j


# --- stories ---------------------------------------------------------------------------

ROUTINES = [
    "swept the step before anyone else was awake",
    "wrote the day's weather on a small blackboard by the door",
    "counted the coins in the till twice, once in each direction",
    "fed the two cats that belonged to nobody in particular",
    "listened to the shipping forecast while the kettle boiled",
    "checked the gauges and wrote the numbers in a ledger",
    "oiled the hinges that squeaked and the ones that only threatened to",
    "walked the long way round, past the bridge and the bakery",
    "answered letters at the kitchen table with a pencil behind one ear",
    "watered the geraniums on the windowsill, one cup each",
    "wound every clock in the house and set them by the radio",
    "read one chapter of a book and no more",
    "sorted the post into piles by street and then by house number",
    "tuned the old piano in the hall, one string a day",
    "mended whatever had been left on the workbench the night before",
    "took the dog along the beach as far as the black rocks",
    "baked two loaves, one to sell and one to give away",
    "swam three lengths of the cold harbour pool",
    "drew a small map of anything that had changed in the street",
    "wrote a list of things to do and then did about half of them",
]
NEVERS = ["missed a day", "lost a single key", "been late for the first ferry",
          "let the stove go out", "forgotten a customer's name", "shouted at a customer",
          "thrown away a useful piece of string", "left the shop without locking it",
          "taken a holiday longer than a week", "turned anyone away at the door"]
EVENTS = [
    "a stranger arrived on the last bus carrying {obj} wrapped in newspaper",
    "the power went out across the whole of {town} and did not come back until dawn",
    "a letter came from {relative} {name2}, who had not written in {years} years",
    "the river rose higher than anyone could remember and lapped at the doorsteps",
    "a child knocked on the door and asked, very seriously, for {obj}",
    "the bell of {place} began to ring by itself a little after midnight",
    "a flock of geese landed in the square and refused to leave",
    "the ferry broke down halfway across and drifted gently towards the sandbanks",
    "someone left {obj} on the counter with a note that said only: please keep this",
    "a storm took the roof off the shed and scattered the tools across three gardens",
    "the town council announced that {place} would close at the end of the month",
    "an old friend, {name2}, walked in as if {pro2} had only been gone for an hour",
    "the clock on the church tower stopped at twenty past four and stayed there",
    "the well in the courtyard, dry for years, was suddenly full of clear water",
    "a radio message came in from a fishing boat that was supposed to have been sold",
    "the lights in {place} began to flicker in a pattern that looked almost like a code",
    "a van from the city parked outside, and two people with clipboards started measuring everything",
    "{name2} arrived out of breath to say that the bridge over {river} had a crack in it",
    "a pipe burst under the floor of {place} and water came up between the tiles",
    "the cat that belonged to nobody came back with three kittens and a look of great satisfaction",
]
RELATIVES = ["a cousin", "an aunt", "an uncle", "a brother", "a sister", "a grandmother",
             "a grandfather", "an old school friend", "a former neighbour"]
TALK = [
    ("What are you going to do about it?", "I don't know yet. Give me until the morning."),
    ("Can it be fixed?", "Probably. Most things can, if you are patient with them."),
    ("Did you know this would happen?", "Nobody knew. That is rather the point."),
    ("How long do we have?", "As long as it takes, and not a minute more."),
    ("Is it safe?", "Safe enough, if we are careful and nobody does anything clever."),
    ("Where did it come from?", "From further away than you would think."),
    ("Do you need help?", "Yes. Bring the big torch and the short ladder."),
    ("Have you ever seen anything like it?", "Once, a long time ago. It ended well, more or less."),
    ("What would your mother have done?", "She would have made a list. So let us make a list."),
    ("Shall I put the kettle on?", "Please. And find the biscuits, the good ones."),
    ("Are you sure about this?", "No. But I am sure that doing nothing is worse."),
    ("Should we wait for the rain to stop?", "Everything can wait until the rain stops, except this."),
    ("Who else knows?", "You, me, and probably half the street by now."),
    ("Is it expensive?", "Not in money. In time, yes."),
    ("Why now, after all these years?", "Things happen when they are ready, not when we are."),
    ("Can I tell the others?", "Tell them tomorrow. Tonight we work."),
    ("What do you need?", "A dry match, a steady hand and a little luck."),
    ("Were you frightened?", "For about a minute. Then there was no time to be."),
]
SAY = ["said", "replied", "answered", "whispered", "admitted", "muttered"]
RESOLUTIONS = [
    "the whole street turned out to help, and by evening the work was done",
    "{name} found the answer in one of the old ledgers, written in {pro_hers} own hand years before",
    "it turned out to be much simpler than anyone had feared",
    "nobody ever found out who was responsible, and after a while nobody minded",
    "{name} and {name2} sat up all night and fixed it with wire, glue and stubbornness",
    "the problem solved itself, as problems sometimes do when they are left alone",
    "{name} wrote a careful letter to the council, and to everyone's surprise it worked",
    "a neighbour lent the missing part, and would not hear of being paid for it",
    "the children of {town} took charge, and did a better job than the adults",
    "they decided to leave things as they were, which was the right decision",
    "{name} made a few phone calls, called in a few favours, and by the end of the week it was sorted",
    "the answer came from the youngest person in the room, who had been listening the whole time",
    "it took three attempts, two borrowed tools and one argument, but it worked",
]
CLOSINGS = [
    "Years later, people in {town} still told the story, though never quite the same way twice.",
    "{name} kept {obj} on the shelf by the window, where it caught the light in the afternoons.",
    "After that, {pro_she} always left the door unlocked on stormy nights, just in case.",
    "It was, {pro_she} decided, the best {season} {pro_she} could remember.",
    "In the logbook that night {pro_she} wrote only one line: all well, lamp lit, kettle on.",
    "The next morning everything was ordinary again, which was exactly how {pro_she} liked it.",
    "Nobody thanked {pro_her}, and {pro_she} would have been embarrassed if they had.",
    "{pro_She} never did find out what the note meant, but {pro_she} kept it all the same.",
    "On the way home {pro_she} stopped on the bridge for a while and watched {river} go by.",
    "{name2} came round the next evening with a cake, which was the custom in {town} for such things.",
    "Some stories end with a lesson. This one ended with supper, which {name} considered better.",
]
OPENINGS = [
    "{name} had worked as {a_job} in {town} for {years} years, and in all that time {pro_she} had never {never}.",
    "Every morning at {time}, {name} unlocked the door of {place} and {routine}.",
    "The {season} that {name} turned {age}, {pro_she} moved to {town} to work as {a_job}.",
    "Nobody in {town} remembered exactly when {name} had first arrived, but everyone knew where to find {pro_her}: at {place}, most days, from {time} until dark.",
    "In {town}, where {river} bends twice before it reaches the sea, there lived {a_job} named {name}.",
    "{name} {surname} was not the kind of person who expected anything to happen, which is perhaps why so much did.",
    "For {years} years {name} had kept {place} in {town} running with little more than patience and a good toolbox.",
    "It was a {day} in {month}, and {weather}, when {name} first noticed that something was wrong at {place}.",
    "People came to {place} in {town} for two reasons: the coffee, and {name}, who had an opinion about everything.",
    "{name} had inherited {obj} and a small debt from an uncle in {town}, and for a long time did not know which was the greater nuisance.",
    "When {name} took the job as {a_job}, the advertisement had promised a quiet life by {river}.",
    "There are towns where nothing changes, and {town} had always been proud of being one of them; {name} liked it that way.",
    "At {age}, {name} still walked to {place} every day, because the doctor had said it was good for {pro_her} and because {pro_she} liked the walk.",
]


def story(r):
    name, p, g = person(r)
    name2, p2, _ = person(r)
    while name2 == name:
        name2, p2, _ = person(r)
    j, a_job = job(r)
    v = dict(name=name, name2=name2, surname=r.choice(SURNAMES), town=town(r),
             river=r.choice(RIVERS), place=r.choice(PLACES), a_job=a_job,
             years=num_word(r.randint(3, 40)), age=num_word(r.randint(19, 70)),
             time=clock(r.randint(5 * 60, 9 * 60) // 5 * 5), season=r.choice(SEASONS),
             month=r.choice(MONTHS), day=r.choice(DAYS), weather=r.choice(WEATHER),
             never=r.choice(NEVERS), obj=r.choice(OBJECTS), relative=r.choice(RELATIVES),
             pro_she=p["she"], pro_She=cap(p["she"]), pro_her=p["her"],
             pro_hers=p["hers"], pro2=p2["she"])
    v["routine"] = r.choice(ROUTINES)
    paras = [r.choice(OPENINGS).format(**v)]
    routine = r.sample(ROUTINES, r.randint(2, 4))
    s = "Most days followed the same pattern. %s %s" % (cap(p["she"]), routine[0])
    for x in routine[1:-1]:
        s += ", " + x
    s += (", and " if len(routine) > 1 else "") + routine[-1] + "."
    if r.chance(0.5):
        s += " " + r.choice([
            "It was not an exciting life, but it was a good one.",
            "Visitors sometimes found this dull. %s did not." % name,
            "The neighbours set their watches by %s." % p["her"],
            "%s liked knowing what the next hour would bring." % cap(p["she"]),
            "In %s, that counted as a full day." % v["town"],
        ])
    paras.append(s)
    ev = r.choice(EVENTS).format(**v)
    paras.append("Then, one %s in %s, %s." % (r.choice(DAY_PARTS), v["month"], ev))
    talk = []
    for q, a in r.sample(TALK, r.randint(2, 4)):
        talk.append('"%s" %s %s.' % (q, r.choice(["asked", "said"]), name2))
        first, _, rest = a.partition(". ")
        if rest:
            talk.append('"%s," %s %s. "%s"' % (first, r.choice(SAY), name, rest))
        else:
            talk.append('"%s," %s %s.' % (a.rstrip("."), r.choice(SAY), name))
    paras.append("\n".join(talk))
    paras.append("In the end, %s." % r.choice(RESOLUTIONS).format(**v))
    paras.append(r.choice(CLOSINGS).format(**v))
    return "\n".join(paras)


FABLE_WANTS = ["to touch the moon", "to learn to swim", "to be the fastest in the forest",
               "to find the end of the river", "to build the biggest nest",
               "to count every star", "to sing like the nightingale",
               "to own the shiniest stone", "to see what lies beyond the hills",
               "to never feel cold again"]
FABLE_TRIES = ["climbed the tallest tree", "asked the wise old owl",
               "practised every day until sunset", "walked for three days and three nights",
               "gathered twigs from every corner of the wood", "waited by the pond",
               "made a plan and wrote it on a leaf", "borrowed a map from the crow"]
FABLE_MORALS = ["Slow and steady often wins the race.",
                "It is better to share than to keep everything for yourself.",
                "A friend in need is worth more than a pocket full of gold.",
                "What you look for far away is sometimes right beside you.",
                "Pride makes a poor travelling companion.",
                "Small kindnesses are never wasted.",
                "Listening is the beginning of wisdom.",
                "Nobody is good at everything, and that is as it should be."]


def fable(r):
    (a1, p1), (a2, p2) = r.sample(ANIMALS, 2)
    her1 = "her" if p1 == "she" else "his"
    want, tries = r.choice(FABLE_WANTS), r.sample(FABLE_TRIES, 3)
    lines = ["Once upon a time there was a little %s who wanted, more than anything, %s." % (a1, want),
             "First %s %s, but it was no use. Then %s %s, and after that %s %s." %
             (p1, tries[0], p1, tries[1], p1, tries[2]),
             "Nothing worked, and the %s sat down by the path and felt very sorry for %s." %
             (a1, "herself" if p1 == "she" else "himself"),
             'Along came a %s. "Why are you so sad?" asked the %s.' % (a2, a2),
             '"I want %s," said the %s, "and I cannot do it."' % (want, a1),
             '"Then let us try together," said the %s.' % a2,
             "So they tried together, and although they did not quite manage it, the %s found that %s did not mind so much any more. %s had a friend now, and the %s was happy." %
             (a1, p1, cap(p1), a2),
             "The moral of the story: " + r.choice(FABLE_MORALS)]
    if r.chance(0.5):
        lines.insert(1, "Every %s %s would look at %s own reflection in the water and sigh." %
                     (r.choice(DAY_PARTS), p1, her1))
    return "\n".join(lines)


KIDS_NAMES = ["Lily", "Tom", "Sam", "Mia", "Ben", "Anna", "Max", "Lucy", "Tim", "Sara",
              "Jack", "Ella", "Leo", "Zoe", "Ravi", "Kim", "Omar", "Ivy"]
KIDS_THINGS = ["a red ball", "a big box", "a little boat", "a shiny stone", "a kite",
               "a teddy bear", "a toy car", "a blue hat", "a small drum", "a book of stars"]
KIDS_PLACES = ["the park", "the garden", "the beach", "the forest", "the pond",
               "the big hill", "the farm", "the zoo", "the river", "the playground"]


def kids_story(r):
    a, b = r.sample(KIDS_NAMES, 2)
    thing, place = r.choice(KIDS_THINGS), r.choice(KIDS_PLACES)
    ev, feel = r.choice([("the wind took %s away" % thing, "sad"),
                         ("a big dog barked very loudly", "scared"),
                         ("it started to rain", "sad"),
                         ("%s fell into the water" % thing, "upset"),
                         ("a loud noise came from the trees", "scared"),
                         ("%s broke" % thing, "sad"),
                         ("the sky went dark and it began to thunder", "scared"),
                         ("%s was lost in the long grass" % thing, "worried")])
    s = ["One day, %s went to %s with %s." % (a, place, thing),
         "%s saw %s and said, \"Can I play too?\"" % (b, a),
         "\"Yes!\" said %s. \"Let's play together.\"" % a,
         "They played all day. They ran and jumped and laughed.",
         "Then %s." % ev,
         "%s felt %s. %s held %s hand." % (a, feel, b, a + "'s"),
         "\"It is okay,\" said %s. \"We are friends.\"" % b,
         "At the end of the day, they went home. %s was %s, and so was %s." %
         (a, r.choice(["happy", "tired but happy", "smiling"]), b)]
    return " ".join(s)


def diary(r):
    name, p, g = person(r)
    d = r.randint(1, 28)
    m = r.choice(MONTHS)
    t = town(r)
    things = r.sample([
        "Slept badly; the neighbours' dog barked at every passing car.",
        "Finished the book about the polar expedition. The last chapter was the best.",
        "Rain all day. Stayed in and sorted the photographs into albums.",
        "Walked to %s and back, about %d kilometres." % (t, r.randint(3, 14)),
        "Called %s. We talked for an hour about nothing in particular." % r.choice(WOMEN + MEN),
        "The tomatoes are finally turning red. Picked %d of them." % r.randint(2, 12),
        "Tried a new recipe for %s. Too much salt; next time half." % r.choice(FOODS),
        "Bought a second-hand bicycle for %d. The brakes need work." % r.randint(25, 140),
        "Long meeting at work. Nothing was decided, but at least it was decided politely.",
        "Saw a heron standing in the ditch by the road, perfectly still.",
        "Paid the electricity bill: %s for the quarter." % money(r.uniform(80, 260)),
        "Wrote three pages of the letter I keep meaning to send.",
        "The train was %d minutes late. Read the paper twice." % r.randint(5, 55),
        "First swim of the year. The water was colder than it looked.",
        "Repaired the shelf in the hall. It is level now, almost.",
        "Learned that the old cinema will reopen in %s." % r.choice(MONTHS),
    ], r.randint(3, 6))
    return "%s, %d %s. %s" % (r.choice(DAYS), d, m, " ".join(things))


# --- conversations ---------------------------------------------------------------------

CONCEPTS = {
    "a checksum": "A checksum is a small number computed from a larger block of data, so that a change in the data almost always changes the number. When you download a file, you can compute its checksum and compare it with the one the publisher lists: if they match, the file very probably arrived intact. A simple checksum adds up the bytes; better ones, such as CRC-32 or SHA-256, are designed so that common errors, and in the case of SHA-256 deliberate tampering, are caught.",
    "a leap year": "A leap year has 366 days instead of 365, with the extra day added as 29 February. The rule in the Gregorian calendar is: a year divisible by 4 is a leap year, except years divisible by 100, which are not, except years divisible by 400, which are. So 2000 was a leap year, 1900 was not, and 2024 was. The rule keeps the calendar within about a day of the seasons over thousands of years.",
    "compound interest": "Compound interest is interest paid on interest. If you deposit 1,000 at 5 percent a year, after one year you have 1,050; in the second year the 5 percent is paid on 1,050, giving 1,102.50, and so on. After n years the balance is 1,000 x 1.05^n, which grows faster and faster. The same arithmetic works against you on a loan, which is why paying off expensive debt early is usually a good idea.",
    "latency and throughput": "Latency is how long one thing takes; throughput is how many things get done per unit of time. A motorway with a speed limit has the same latency for one car whether it has two lanes or six, but the six-lane road has three times the throughput. In computing, a fast disk can have low latency for a single read but modest throughput, while a network link to another continent can have high throughput and high latency at the same time.",
    "a hash table": "A hash table stores values under keys so that looking one up takes, on average, the same short time however many entries there are. It computes a hash of the key, a number, and uses it to pick a slot in an array. Two keys can land in the same slot, so each slot holds a short list, or the table probes the next free slot. When the table fills up, it grows and moves every entry to a new, larger array.",
    "a time zone": "A time zone is a region that uses the same clock time. Because the Earth turns, noon arrives at different moments in different places, and time zones round this off into bands, usually whole hours apart from Coordinated Universal Time (UTC). Many countries also shift their clocks by an hour in summer. When you schedule a call across zones, it is safest to state the time in UTC or in both local times.",
    "a watershed": "A watershed, or drainage basin, is all the land whose rain and snowmelt flows to the same river, lake or sea. Its edges follow the ridges of hills and mountains: a raindrop falling on one side of a ridge ends up in one river, and a drop a metre away on the other side in another. Pollution anywhere in a watershed can reach every place downstream of it.",
    "an index in a database": "An index is a sorted structure a database keeps beside a table so that it can find rows without reading all of them, much like the index at the back of a book. An index on a column of customer names lets a query for one name jump straight to the matching rows. Indexes make reads faster and writes slower, since every insert and update must also update the index, so you add them for the queries you actually run.",
    "a fraction": "A fraction describes part of a whole: the bottom number, the denominator, says into how many equal parts the whole is divided, and the top number, the numerator, how many of those parts you have. Three quarters, 3/4, means three of four equal parts. Two fractions are equal when they describe the same amount, like 1/2 and 2/4, and you can add fractions once they are written over the same denominator.",
    "a compiler": "A compiler translates a program written in a language people can read, such as C or Rust, into instructions a processor can execute. It first reads the text and checks that it follows the rules of the language, then builds an internal representation of what the program means, improves it (removing work that is never used, keeping values in registers), and finally writes machine code. An interpreter, by contrast, runs the program directly, statement by statement.",
    "a tide": "Tides are the regular rise and fall of the sea, caused mostly by the pull of the Moon and, to a lesser extent, the Sun. The Moon's gravity pulls hardest on the side of the Earth facing it and least on the far side, which stretches the oceans into two bulges; as the Earth turns, most coasts pass through both bulges each day, giving two high tides roughly twelve hours and twenty-five minutes apart.",
    "a median": "The median of a list of numbers is the middle value once they are sorted: half the numbers are below it and half above. For 3, 7, 8, 12 and 40 the median is 8, while the mean is 14, pulled upward by the single large value. That is why incomes and house prices are often reported as medians: a few very large values move the mean a lot and the median hardly at all.",
    "a cache": "A cache keeps a copy of data close at hand so that the next request for it is faster. Your browser caches images so a page you visit again loads quickly; a processor caches recently used memory in small, fast storage next to its cores. Every cache must decide what to throw away when it is full, often the item used least recently, and must be careful not to serve a copy that has gone out of date.",
    "photosynthesis": "Plants, algae and some bacteria capture the energy of light and store it in sugar. Inside their cells, chlorophyll absorbs mostly red and blue light, which is why leaves look green, and the energy is used to split water and to combine carbon dioxide from the air into glucose. Oxygen is released as a by-product, and nearly all the oxygen we breathe was produced this way.",
    "a semaphore": "A semaphore is a counter that threads use to share a limited resource. A thread that wants the resource decrements the counter; if the counter would go below zero, the thread waits until another thread increments it again by releasing the resource. A semaphore that starts at 1 works like a lock; one that starts at 4 lets up to four threads in at once, for example to limit how many downloads run in parallel.",
    "inflation": "Inflation is the general rise in prices over time, which means the same amount of money buys a little less each year. It is usually measured by following the price of a basket of everyday goods and services. Moderate, predictable inflation is considered normal; very high inflation makes planning hard, and falling prices, deflation, can lead people to delay spending, which slows the economy.",
}
CODE_QA = [
    ("How do I reverse a list in Python?",
     "Use slicing, which returns a new list, or the reverse() method, which changes the list in place:\nitems = [3, 1, 4, 1, 5]\nbackwards = items[::-1]   # [5, 1, 4, 1, 3]\nitems.reverse()           # items is now [5, 1, 4, 1, 3]"),
    ("How can I read a file line by line in Python without loading it all?",
     "Iterate over the file object; it reads one line at a time:\nwith open(\"data.txt\", encoding=\"utf-8\") as f:\n    for line in f:\n        process(line.rstrip(\"\\n\"))\nThe with block closes the file even if process() raises an exception."),
    ("What does git rebase do, compared with git merge?",
     "Both bring the changes of one branch into another. Merge keeps both histories and adds a merge commit that joins them. Rebase replays your commits one by one on top of the other branch, as if you had started from its latest commit, which gives a straight history. Rebase rewrites commits, so avoid it on branches other people have already pulled."),
    ("How do I find the largest files in a directory on Linux?",
     "du reports sizes and sort orders them:\ndu -ah /path/to/dir | sort -rh | head -n 20\n-a includes files as well as directories, -h prints human-readable sizes, and sort -rh sorts those sizes from largest to smallest."),
    ("Why does 0.1 + 0.2 not equal 0.3 in JavaScript?",
     "Numbers are stored in binary floating point, and 0.1 and 0.2 have no exact binary representation, just as 1/3 has no exact decimal one. Their sum is 0.30000000000000004. Compare with a tolerance, Math.abs(a - b) < 1e-9, or work in integers, for example cents instead of euros."),
    ("What is the difference between a process and a thread?",
     "A process is a running program with its own memory; two processes cannot see each other's variables unless they set up shared memory explicitly. Threads are paths of execution inside one process: they share its memory, which makes communication cheap and also makes it easy for two threads to change the same data at once, so shared data needs locks or other synchronization."),
    ("How do I make a SQL query return only the first ten rows?",
     "Most databases use LIMIT:\nSELECT name, score FROM results ORDER BY score DESC LIMIT 10;\nSQL Server uses SELECT TOP 10 ..., and standard SQL has FETCH FIRST 10 ROWS ONLY. Always add ORDER BY, otherwise which ten rows you get is not defined."),
    ("What does chmod 644 mean?",
     "Each digit sets permissions for one group of users: owner, group, others. 6 is read + write (4 + 2), 4 is read only. So 644 lets the owner read and write the file and everyone else only read it. For a directory or a script you usually want 755, which adds execute (1) for everyone."),
]
ADVICE = {
    "sleep better": ["Go to bed and get up at the same time every day, weekends included.",
                     "Keep the bedroom cool, dark and quiet.",
                     "Avoid caffeine after about two in the afternoon.",
                     "Put screens away half an hour before bed.",
                     "If you cannot sleep after twenty minutes, get up and read until you feel sleepy."],
    "learn a language": ["Practise a little every day rather than a lot once a week.",
                         "Learn the most common few hundred words first.",
                         "Listen to simple podcasts or children's programmes.",
                         "Find someone to talk to, even badly, as early as you can.",
                         "Keep a notebook of phrases you actually want to say."],
    "save money on food": ["Plan the week's meals before you shop, and write a list.",
                           "Cook larger batches and freeze portions.",
                           "Buy fruit and vegetables in season.",
                           "Compare the price per kilogram, not the price per packet.",
                           "Use up what is already in the fridge before buying more."],
    "keep houseplants alive": ["Check the soil with a finger before watering; most plants die from too much water.",
                               "Put plants where the light suits them: cacti in the sun, ferns in shade.",
                               "Use pots with drainage holes.",
                               "Feed them lightly in spring and summer, not in winter.",
                               "Wipe dust off large leaves now and then."],
    "write clearer emails": ["Put the request or the decision in the first sentence.",
                             "Use a subject line that says what the email is about.",
                             "Keep one topic per email.",
                             "Use short paragraphs and, for steps, a numbered list.",
                             "Read it once as the recipient before you press send."],
    "get started with running": ["Begin with intervals: one minute running, two minutes walking, repeated.",
                                 "Run slowly enough that you could hold a conversation.",
                                 "Increase your weekly distance by no more than about ten percent.",
                                 "Take rest days; that is when the body adapts.",
                                 "Buy shoes that fit well rather than shoes that look fast."],
}
UNITS = [("kilometres", "kilometre", "miles", 0.621371),
         ("miles", "mile", "kilometres", 1.609344),
         ("kilograms", "kilogram", "pounds", 2.204623),
         ("pounds", "pound", "kilograms", 0.453592),
         ("litres", "litre", "US gallons", 0.264172),
         ("metres", "metre", "feet", 3.280840),
         ("inches", "inch", "centimetres", 2.54),
         ("ounces", "ounce", "grams", 28.349523)]
DISHES = [("pancakes", [("flour", 200, "g"), ("milk", 300, "ml"), ("eggs", 2, ""),
                        ("butter", 30, "g")]),
          ("lentil soup", [("red lentils", 250, "g"), ("onions", 2, ""), ("carrots", 3, ""),
                           ("stock", 1200, "ml")]),
          ("tomato sauce", [("tinned tomatoes", 800, "g"), ("olive oil", 45, "ml"),
                            ("garlic cloves", 3, ""), ("salt", 6, "g")]),
          ("bread rolls", [("flour", 500, "g"), ("water", 320, "ml"), ("yeast", 7, "g"),
                           ("salt", 10, "g")]),
          ("fruit crumble", [("apples", 6, ""), ("flour", 150, "g"), ("butter", 100, "g"),
                             ("sugar", 80, "g")])]


def fmt_qty(q, unit):
    if unit == "":
        return "%g" % round(q, 1)
    return "%g %s" % (round(q), unit)


def chat(r):
    kind = r.below(7)
    if kind == 0:
        a, one, b, f = r.choice(UNITS)
        x = r.randint(2, 250) if r.chance(0.7) else round(r.uniform(1.5, 40), 1)
        return ("User: How many %s is %s %s?\nAssistant: %s %s is about %.2f %s. "
                "One %s is %g %s, so multiply %s by %g." %
                (b, x, a, x, a, x * f, b, one, f, b, x, f))
    if kind == 1:
        dish, items = r.choice(DISHES)
        n, m = r.randint(2, 6), r.randint(2, 12)
        while m == n:
            m = r.randint(2, 12)
        have = ", ".join("%s %s" % (fmt_qty(q, u), name) for name, q, u in items)
        need = "\n".join("- %s: %s" % (name, fmt_qty(q * m / n, u)) for name, q, u in items)
        return ("User: My recipe for %s serves %d and uses %s. How much of each do I need for %d people?\n"
                "Assistant: Multiply every quantity by %d/%d = %.3g:\n%s\nRound the eggs to a whole number, and check the seasoning at the end, since salt does not always scale exactly." %
                (dish, n, have, m, m, n, m / n, need))
    if kind == 2:
        dist, speed = r.randint(40, 900), r.choice([50, 60, 70, 80, 90, 100, 110, 120])
        start = r.randint(6 * 60, 14 * 60) // 5 * 5
        t = dist / speed * 60
        stop = r.choice([0, 15, 20, 30, 45])
        end = start + round(t) + stop
        return ("User: I'm driving %d km at an average of %d km/h, leaving at %s%s. When will I arrive?\n"
                "Assistant: %d km at %d km/h takes %d hours and %d minutes%s. Leaving at %s, you should arrive around %s. Allow extra time for traffic and fuel."
                % (dist, speed, clock(start),
                   " with a %d-minute break" % stop if stop else "",
                   dist, speed, int(t // 60), round(t) % 60,
                   ", plus the %d-minute break" % stop if stop else "",
                   clock(start), clock(end)))
    if kind == 3:
        price = r.randint(8, 400) + r.choice([0, 0.5, 0.99, 0.25])
        pct = r.choice([5, 10, 15, 20, 25, 30, 40, 50])
        off = price * pct / 100
        return ("User: A jacket costs %s and is %d%% off. What do I pay?\nAssistant: %d%% of %s is %s, "
                "so you pay %s - %s = %s." %
                (money(price), pct, pct, money(price), money(off), money(price), money(off),
                 money(price - off)))
    if kind == 4:
        c = r.choice(sorted(CONCEPTS))
        q = r.choice(["What is %s?", "Can you explain %s in simple terms?",
                      "I never understood %s. What is it?", "Explain %s, briefly."]) % c
        return "User: %s\nAssistant: %s" % (q, CONCEPTS[c])
    if kind == 5:
        q, a = r.choice(CODE_QA)
        return "User: %s\nAssistant: %s" % (q, a)
    goal = r.choice(sorted(ADVICE))
    tips = r.sample(ADVICE[goal], r.randint(3, 5))
    out = "User: Any tips to %s?\nAssistant: A few that work for most people:\n" % goal
    out += "\n".join("%d. %s" % (i + 1, t) for i, t in enumerate(tips))
    if r.chance(0.5):
        out += "\nUser: Thanks. Which one matters most?\nAssistant: The first. " + r.choice([
            "Habits beat intentions.", "Start there and add the others later.",
            "It makes the rest easier.", "Most people skip it, and it shows."])
    return out


def schedule_chat(r):
    tasks = r.sample(["answer email", "review the budget", "call the plumber",
                      "write the report", "go to the post office", "prepare slides",
                      "buy groceries", "fix the printer", "read the contract",
                      "walk the dog", "book the train tickets", "clean the kitchen"],
                     r.randint(3, 6))
    mins = [r.choice([10, 15, 20, 25, 30, 45, 60, 90]) for _ in tasks]
    start = r.randint(7 * 60, 13 * 60) // 15 * 15
    desc = ", ".join("%s (%d min)" % (t, m) for t, m in zip(tasks, mins))
    lines = []
    t = start
    for task, m in zip(tasks, mins):
        lines.append("%s-%s %s" % (clock(t), clock(t + m), task))
        t += m
    return ("User: I start at %s and need to %s, in that order. When will I be done?\n"
            "Assistant: Here is the plan:\n%s\nThat is %d minutes in all, so you finish at %s, "
            "without breaks." % (clock(start), desc, "\n".join(lines), sum(mins), clock(t)))


# --- manuals, reference text, logs, configuration --------------------------------------

BRAND_A = ["Nor", "Alt", "Vel", "Kes", "Bri", "Ost", "Lum", "Tar", "Ein", "Sol", "Mar",
           "Pel", "Ryn", "Hal", "Cal", "Dov"]
BRAND_B = ["vik", "aro", "tek", "sund", "ford", "ion", "etta", "wave", "mark", "line",
           "craft", "ium"]
DEVICES = {
    "water pump": [("Flow rate", "%d l/min", 10, 90), ("Maximum head", "%d m", 5, 45),
                   ("Power", "%d W", 250, 1500), ("Inlet", "%d mm", 25, 50),
                   ("Weight", "%.1f kg", 4, 18)],
    "weather station": [("Temperature range", "-%d to +60 C", 20, 40),
                        ("Humidity accuracy", "+/- %d %%", 2, 5),
                        ("Wind speed range", "0 to %d m/s", 30, 60),
                        ("Transmission range", "%d m", 50, 300),
                        ("Battery life", "%d months", 6, 24)],
    "label printer": [("Resolution", "%d dpi", 180, 600), ("Print speed", "%d mm/s", 30, 150),
                      ("Label width", "up to %d mm", 24, 110), ("Interfaces", "USB, %d-pin serial", 6, 9),
                      ("Memory", "%d MB", 8, 64)],
    "coffee grinder": [("Burr diameter", "%d mm", 38, 64), ("Grind settings", "%d steps", 20, 60),
                       ("Hopper capacity", "%d g", 150, 450), ("Motor", "%d W", 120, 350),
                       ("Noise", "%d dB", 62, 80)],
    "thermostat": [("Set point range", "%d to 30 C", 5, 12), ("Accuracy", "+/- 0.%d C", 1, 5),
                   ("Wireless range", "%d m indoors", 15, 40), ("Standby power", "0.%d W", 2, 9),
                   ("Schedules", "%d programmes a day", 4, 8)],
    "dehumidifier": [("Extraction", "%d l/day", 10, 30), ("Tank", "%.1f l", 2, 6),
                     ("Power", "%d W", 180, 450), ("Room size", "up to %d m2", 20, 80),
                     ("Noise", "%d dB", 35, 52)],
    "bicycle light": [("Output", "%d lumen", 200, 1500), ("Run time", "%d h on low", 6, 40),
                      ("Charging", "USB-C, %d h", 2, 6), ("Weight", "%d g", 60, 220),
                      ("Water resistance", "IPX%d", 4, 7)],
    "solar charge controller": [("Rated current", "%d A", 10, 60),
                                ("Battery voltage", "%d V", 12, 48),
                                ("Max. panel voltage", "%d V", 50, 150),
                                ("Efficiency", "%d %%", 93, 98),
                                ("Self-consumption", "%d mA", 8, 30)],
}
SYMPTOMS = [
    ("The display stays dark", "No power, or the fuse has blown",
     "Check the socket with another appliance; replace the fuse with one of the same rating"),
    ("The unit switches off after a few minutes", "Overheating protection",
     "Clear the air vents and let it cool for 30 minutes before restarting"),
    ("Readings jump or drift", "Sensor dirty or badly placed",
     "Clean the sensor with a dry brush and move it away from heat sources"),
    ("A loud humming noise", "Loose mounting or a foreign object",
     "Switch off, unplug, tighten the screws and check the housing"),
    ("The wireless connection drops", "Interference or low battery",
     "Move the base station, replace the batteries, and avoid placing it next to a router"),
    ("Error code E%d appears", "Internal self-test failed",
     "Unplug for one minute; if the code returns, contact the service centre"),
    ("Water collects under the unit", "Drain blocked or hose kinked",
     "Straighten the hose and rinse the drain with warm water"),
]


def manual(r):
    kind = r.choice(sorted(DEVICES))
    brand = r.choice(BRAND_A) + r.choice(BRAND_B)
    model = "%s-%d%s" % ("".join(r.sample("ABCDEFGHKLMNPRSTVX", 2)), r.randint(10, 990),
                         r.choice(["", "", "S", "X", " Pro", " Mini"]))
    out = ["%s %s %s: quick start and specifications" % (brand, model, kind)]
    out.append("Specifications:")
    for label, fmt, lo, hi in DEVICES[kind]:
        v = r.uniform(lo, hi) if "%.1f" in fmt else r.randint(lo, hi)
        out.append("  %-22s %s" % (label + ":", fmt % v))
    steps = [
        "Unpack the %s and check that nothing is damaged; keep the box until you have tested it." % kind,
        "Place it on a flat, dry surface at least %d cm from walls and other appliances." % r.choice([10, 15, 20, 30]),
        "Connect the power supply supplied in the box; do not use another adapter.",
        "Press and hold the power button for %d seconds until the indicator turns %s." %
        (r.randint(2, 5), r.choice(["green", "blue", "white"])),
        "Follow the prompts on the display to set the language, date and time.",
        "Run the self-test from the settings menu; it takes about %d minutes." % r.randint(1, 6),
    ]
    out.append("Getting started:")
    out += ["  %d. %s" % (i + 1, s) for i, s in enumerate(steps[:r.randint(4, 6)])]
    out.append("Troubleshooting:")
    for sym, cause, fix in r.sample(SYMPTOMS, r.randint(2, 4)):
        if "%d" in sym:
            sym = sym % r.randint(1, 9)
        out.append("  %s. Likely cause: %s. What to do: %s." % (sym, cause.lower(),
                                                                fix[0].lower() + fix[1:]))
    out.append("Maintenance: clean the housing with a damp cloth every %d weeks; have the unit "
               "inspected every %d years. Warranty: %s from the date of purchase." %
               (r.choice([2, 4, 6, 8]), r.choice([2, 3, 5]), plural(r.choice([1, 2, 3, 5]), "year")))
    return "\n".join(out)


VERBS = ["parse", "load", "write", "merge", "split", "encode", "decode", "resize", "flush",
         "open", "close", "find", "count", "sort", "validate", "compress", "render", "sync"]
NOUNS = ["buffer", "record", "header", "index", "frame", "token", "segment", "config",
         "entry", "batch", "table", "packet", "channel", "page", "block", "schema"]


def api_doc(r):
    mod = r.choice(["ringlog", "tinyhttp", "csvkit", "imgpipe", "geotools", "netq", "kvstore",
                    "audiofx", "mathlite", "textwrap"])
    verb, noun = r.choice(VERBS), r.choice(NOUNS)
    fn = "%s_%s_%s" % (mod, verb, noun)
    types = {"data": "const void *", "len": "size_t ", "flags": "unsigned ", "out": "void *",
             "capacity": "size_t ", "path": "const char *", "timeout_ms": "int ",
             "ctx": "%s_ctx *" % mod}
    names = ["ctx"] + r.sample(["data", "len", "flags", "out", "capacity", "path", "timeout_ms"],
                               r.randint(1, 3))
    params = [types[n] + n for n in names]
    text = ["%s(%s)" % (fn, ", ".join(params)),
            "%ss the %s and stores the result in the caller's memory. Returns 0 on success "
            "and a negative error code on failure; on failure nothing is written." %
            (cap(verb), noun)]
    for p in params:
        pname = p.split()[-1].lstrip("*")
        desc = {"data": "the input bytes; not modified", "len": "number of bytes in data",
                "flags": "a bitwise OR of the %s_FLAG_* constants, or 0" % mod.upper(),
                "out": "receives the result; may be NULL to query the size only",
                "capacity": "size of out in bytes", "path": "a NUL-terminated file path",
                "timeout_ms": "how long to wait, in milliseconds; 0 waits forever",
                "ctx": "the context returned by %s_create()" % mod}[pname]
        text.append("  %s: %s." % (pname, desc))
    errs = r.sample(["-EINVAL: an argument is out of range",
                     "-ENOMEM: an allocation failed",
                     "-EIO: reading or writing failed",
                     "-ETIMEDOUT: the timeout expired first",
                     "-ENOSPC: out is too small; the size needed is returned in *len"], 2)
    text.append("Errors: " + "; ".join(errs) + ".")
    text.append("Thread safety: %s." % r.choice([
        "safe to call from several threads on different contexts",
        "not thread-safe; protect the context with a lock",
        "safe; the function keeps no global state"]))
    text.append("Since version %d.%d." % (r.randint(0, 3), r.randint(1, 20)))
    return "\n".join(text)


CHANGES = ["Fixed a crash when the input file was empty.",
           "Fixed a memory leak in the error path of the parser.",
           "Added an option to write the output atomically.",
           "Added support for reading gzip-compressed input.",
           "Improved start-up time by about %d percent.",
           "The --verbose flag now prints timings for each stage.",
           "Dropped support for the old configuration format (deprecated since %d.0).",
           "Error messages now name the file and line.",
           "Made the progress bar turn itself off when output is not a terminal.",
           "Updated the documentation of the command-line options.",
           "Fixed rounding of values exactly halfway between two steps.",
           "Reduced memory use for large inputs by reading them in chunks.",
           "Added a --dry-run option that reports what would change.",
           "Fixed the exit code when a required file is missing.",
           "Sorted the output by name so that it is reproducible."]


def changelog(r):
    name = r.choice(["tidyup", "snapshotter", "mapmaker", "quickcsv", "logrotate-lite",
                     "photosort", "budgetbook", "tinysync", "notecard", "shelfmark"])
    major, minor, patch = 1, r.randint(0, 4), 0
    y, m = r.randint(2016, 2024), r.randint(1, 12)
    blocks, pool = [], list(CHANGES)
    r.shuffle(pool)
    for _ in range(r.randint(3, 6)):
        if r.chance(0.3):
            minor, patch = minor + 1, 0
        else:
            patch += 1
        m += r.randint(1, 4)
        y, m = y + (m - 1) // 12, (m - 1) % 12 + 1
        b = ["%d.%d.%d (%d-%02d-%02d)" % (major, minor, patch, y, m, r.randint(1, 28))]
        for c in [pool.pop() for _ in range(min(len(pool), r.randint(1, 4)))]:
            if "%d" in c:
                c = c % (r.randint(5, 40) if "percent" in c else max(1, major))
            b.append("  - " + c)
        blocks.append("\n".join(b))
    blocks.reverse()
    return "%s changelog, newest first\n%s" % (name, "\n".join(blocks))


PATHS = ["/api/v1/orders/%d", "/api/v1/users/%d/profile", "/static/css/site.css",
         "/static/js/app.%x.js", "/login", "/health", "/find?q=%s", "/images/%d.jpg",
         "/api/v2/reports/%d/export", "/metrics"]
WORDS = ["tea", "boots", "lamp", "atlas", "piano", "kettle", "maple", "rope", "oar"]


def access_log(r):
    t = r.randint(0, 86000)
    y, mo, d = r.randint(2019, 2025), r.randint(1, 12), r.randint(1, 28)
    out = []
    for _ in range(r.randint(8, 20)):
        t += r.randint(0, 40)
        p = r.choice(PATHS)
        if "%d" in p:
            p = p % r.randint(1, 99999)
        elif "%x" in p:
            p = p % r.randint(0x10000, 0xfffff)
        elif "%s" in p:
            p = p % r.choice(WORDS)
        status = r.choice([200] * 12 + [201, 204, 301, 304, 400, 401, 403, 404, 404, 500, 503])
        ip = "%s.%d" % (r.choice(["192.0.2", "198.51.100", "203.0.113"]), r.randint(1, 254))
        out.append('%s - - [%02d/%s/%d:%02d:%02d:%02d +0000] "%s %s HTTP/1.1" %d %d %.3f' %
                   (ip, d, MONTHS[mo - 1][:3], y, t // 3600 % 24, t // 60 % 60, t % 60,
                    "POST" if "login" in p or "export" in p else "GET", p, status,
                    r.randint(0, 90000) if status not in (204, 304) else 0,
                    r.uniform(0.001, 1.8)))
    return "\n".join(out)


APP_MSGS = [("INFO", "worker %d started", 1, 16), ("INFO", "loaded %d records from cache", 100, 90000),
            ("DEBUG", "retrying request to upstream (attempt %d of 5)", 2, 5),
            ("WARN", "queue depth %d exceeds soft limit", 1000, 20000),
            ("INFO", "checkpoint written (%d MB)", 5, 900),
            ("ERROR", "connection reset by peer after %d ms", 3, 30000),
            ("WARN", "disk usage at %d percent on /var", 80, 99),
            ("INFO", "rotated log file, kept %d", 3, 30),
            ("DEBUG", "cache hit ratio %d percent over the last minute", 40, 99),
            ("ERROR", "timeout waiting for lock after %d s", 5, 120),
            ("INFO", "request handled in %d ms", 1, 900),
            ("INFO", "shutdown requested, draining %d jobs", 0, 200)]


def app_log(r):
    svc = r.choice(["ingest", "billing", "scheduler", "thumbnailer", "mailer", "indexer"])
    t = r.randint(0, 80000)
    day = "2024-%02d-%02d" % (r.randint(1, 12), r.randint(1, 28))
    pid = r.randint(100, 32000)
    out = []
    for _ in range(r.randint(8, 18)):
        t += r.randint(0, 300)
        lvl, msg, lo, hi = r.choice(APP_MSGS)
        out.append("%sT%02d:%02d:%02d.%03dZ %-5s %s[%d]: %s" %
                   (day, t // 3600 % 24, t // 60 % 60, t % 60, r.below(1000), lvl, svc, pid,
                    msg % r.randint(lo, hi)))
    return "\n".join(out)


def config_file(r):
    svc = r.choice(["gateway", "reporter", "uploader", "scheduler", "notifier", "archiver"])
    port, workers = r.randint(1024, 9999), r.choice([2, 4, 8, 16])
    kind = r.below(4)
    if kind == 0:
        return ("# %s.yaml\nservice:\n  name: %s\n  port: %d\n  workers: %d\nlogging:\n"
                "  level: %s\n  file: /var/log/%s.log\nstorage:\n  path: /srv/%s/data\n"
                "  max_size_gb: %d\n  retention_days: %d\nfeatures:\n  - %s\n  - %s" %
                (svc, svc, port, workers, r.choice(["info", "debug", "warn"]), svc, svc,
                 r.randint(5, 500), r.choice([7, 14, 30, 90]),
                 *r.sample(["compression", "metrics", "tracing", "rate_limit", "audit_log"], 2)))
    if kind == 1:
        return ('{\n  "service": "%s",\n  "listen": "0.0.0.0:%d",\n  "workers": %d,\n'
                '  "timeouts": {"connect_ms": %d, "read_ms": %d},\n  "retry": {"max": %d, '
                '"backoff": %.1f},\n  "allowed_origins": ["https://example.org", '
                '"https://example.net"]\n}' %
                (svc, port, workers, r.choice([250, 500, 1000]), r.choice([2000, 5000, 10000]),
                 r.randint(2, 6), r.uniform(1.2, 3.0)))
    if kind == 2:
        return ("[%s]\nhost = 127.0.0.1\nport = %d\nthreads = %d\n\n[database]\nname = %s_db\n"
                "pool_size = %d\nstatement_timeout = %ds" %
                (svc, port, workers, svc, r.choice([5, 10, 20]), r.choice([5, 15, 30]))
                ).replace("\n\n", "\n")
    return ('# %s.toml\n[server]\naddress = "127.0.0.1"\nport = %d\n[limits]\n'
            'max_body_kb = %d\nrequests_per_minute = %d\n[paths]\ndata = "/srv/%s"\n'
            'tmp = "/tmp/%s"' % (svc, port, r.choice([64, 256, 1024]),
                                 r.choice([60, 120, 600]), svc, svc))


# --- source code -----------------------------------------------------------------------

THINGS = ["order", "reading", "sample", "invoice", "ticket", "parcel", "station", "track",
          "sensor", "booking", "recipe", "student", "vehicle", "shipment", "song", "plant"]
FIELDS = ["weight", "price", "score", "duration", "distance", "temperature", "count",
          "level", "speed", "volume", "rating", "height"]


PY_NAMES = {"fh": ["fh", "f", "stream", "src"], "total": ["total", "acc", "running"],
            "out": ["out", "result", "means"], "counts": ["counts", "tally", "freq"],
            "settings": ["settings", "options", "conf"], "merged": ["merged", "joined"],
            "word": ["word", "label", "text"], "delay": ["delay", "wait", "pause"],
            "items": ["items", "stock", "entries"], "values": ["values", "numbers", "xs"]}


def renamed(r, code, names):
    """code with each identifier of names replaced by one of its spellings."""
    for old in sorted(names):
        code = re.sub(r"\b%s\b" % old, r.choice(names[old]), code)
    return code


def py_code(r):
    return renamed(r, py_template(r), PY_NAMES)


def py_template(r):
    t, f = r.choice(THINGS), r.choice(FIELDS)
    k = r.below(8)
    if k == 0:
        w = r.randint(2, 9)
        return ('def rolling_%s(values, window=%d):\n    """Mean of each run of `window` consecutive values."""\n'
                '    if window <= 0:\n        raise ValueError("window must be positive")\n'
                '    out, total = [], 0.0\n    for i, v in enumerate(values):\n        total += v\n'
                '        if i >= window:\n            total -= values[i - window]\n'
                '        if i >= window - 1:\n            out.append(total / window)\n    return out\n'
                'print(rolling_%s([%s], %d))' %
                (f, w, f, ", ".join(str(r.randint(0, 99)) for _ in range(w + 4)), w))
    if k == 1:
        return ('from collections import Counter\nimport sys\n'
                'def top_words(path, n=%d):\n    counts = Counter()\n'
                '    with open(path, encoding="utf-8") as fh:\n        for line in fh:\n'
                '            counts.update(w.strip(".,;:!?\\"\'()").lower() for w in line.split())\n'
                '    counts.pop("", None)\n    return counts.most_common(n)\n'
                'if __name__ == "__main__":\n    for word, c in top_words(sys.argv[1]):\n'
                '        print(f"{c:6d}  {word}")' % r.randint(5, 25))
    if k == 2:
        return ('def load_settings(path):\n    """key = value lines; # starts a comment."""\n'
                '    settings = {}\n    with open(path, encoding="utf-8") as fh:\n'
                '        for number, line in enumerate(fh, 1):\n'
                '            line = line.split("#", 1)[0].strip()\n            if not line:\n'
                '                continue\n            if "=" not in line:\n'
                '                raise ValueError(f"{path}:{number}: expected key = value")\n'
                '            key, value = (part.strip() for part in line.split("=", 1))\n'
                '            settings[key] = value\n    return settings\n'
                'defaults = {"%s_limit": "%d", "%s_unit": "%s"}' %
                (t, r.randint(10, 500), f, r.choice(["kg", "s", "km", "C", "l"])))
    if k == 3:
        return ('from dataclasses import dataclass, field\n@dataclass\nclass %s:\n'
                '    name: str\n    %s: float = 0.0\n    tags: list = field(default_factory=list)\n'
                '    def is_heavy(self, limit=%d.0):\n        return self.%s > limit\n'
                'items = [%s]\nheavy = [i.name for i in items if i.is_heavy()]\n'
                'print(len(items), "items,", len(heavy), "over the limit:", heavy)' %
                (cap(t), f, r.randint(10, 90), f,
                 ", ".join('%s("%s-%d", %d)' % (cap(t), t, i, r.randint(1, 120))
                           for i in range(r.randint(2, 5)))))
    if k == 4:
        return ('import time\ndef with_retries(fn, attempts=%d, base_delay=%.1f):\n'
                '    """Calls fn(), waiting base_delay * 2**i seconds after failure i."""\n'
                '    for i in range(attempts):\n        try:\n            return fn()\n'
                '        except OSError as err:\n            if i == attempts - 1:\n'
                '                raise\n            delay = base_delay * 2 ** i\n'
                '            print(f"attempt {i + 1} failed ({err}); retrying in {delay:.1f} s")\n'
                '            time.sleep(delay)' % (r.randint(3, 7), r.uniform(0.1, 2.0)))
    if k == 5:
        a, b = r.sample([3, 4, 5, 6, 7], 2)
        wa, wb = r.sample(["Fizz", "Buzz", "Ping", "Pong", "Tick", "Tock", "Zip", "Zap"], 2)
        return ('for n in range(1, %d):\n    word = ""\n    if n %% %d == 0:\n        word += "%s"\n'
                '    if n %% %d == 0:\n        word += "%s"\n    print(word or n)' %
                (r.randint(16, 40), a, wa, b, wb))
    if k == 6:
        return ('def merge_intervals(intervals):\n    """Joins overlapping [start, end] pairs."""\n'
                '    merged = []\n    for start, end in sorted(intervals):\n'
                '        if merged and start <= merged[-1][1]:\n'
                '            merged[-1][1] = max(merged[-1][1], end)\n        else:\n'
                '            merged.append([start, end])\n    return merged\n'
                'assert merge_intervals([[1, 3], [2, 6], [8, 10], [9, 12]]) == [[1, 6], [8, 12]]\n'
                'print(merge_intervals([%s]))' %
                ", ".join("[%d, %d]" % (s, s + r.randint(1, 6))
                          for s in sorted(r.randint(0, 30) for _ in range(4))))
    return ('import argparse\ndef main():\n    p = argparse.ArgumentParser(description="Summarise %s %ss.")\n'
            '    p.add_argument("files", nargs="+", help="CSV files with a %s column")\n'
            '    p.add_argument("--min", type=float, default=%d, help="ignore smaller values")\n'
            '    args = p.parse_args()\n    import csv\n    values = []\n    for name in args.files:\n'
            '        with open(name, newline="") as fh:\n'
            '            values += [float(row["%s"]) for row in csv.DictReader(fh)\n'
            '                       if float(row["%s"]) >= args.min]\n'
            '    if values:\n        print(f"n={len(values)} mean={sum(values) / len(values):.2f} max={max(values)}")\n'
            'if __name__ == "__main__":\n    main()' % (t, f, f, r.randint(0, 10), f, f))


def c_code(r):
    t, f = r.choice(THINGS), r.choice(FIELDS)
    k = r.below(5)
    if k == 0:
        return ('#include <stddef.h>\n/* Sum of the %ss of n %ss; 0 for n == 0. */\n'
                'double %s_total_%s(const double *%s, size_t n)\n{\n    double sum = 0.0;\n'
                '    for (size_t i = 0; i < n; i++)\n        sum += %s[i];\n    return sum;\n}' %
                (f, t, t, f, f, f))
    if k == 1:
        return ('#include <stdlib.h>\n#include <string.h>\ntypedef struct %s {\n    char name[%d];\n'
                '    int %s;\n    struct %s *next;\n} %s;\n'
                '/* Pushes a new %s at the head of *list; returns NULL when out of memory. */\n'
                '%s *%s_push(%s **list, const char *name, int %s)\n{\n'
                '    %s *node = calloc(1, sizeof *node);\n    if (!node)\n        return NULL;\n'
                '    strncpy(node->name, name, sizeof node->name - 1);\n    node->%s = %s;\n'
                '    node->next = *list;\n    *list = node;\n    return node;\n}' %
                ((t, r.choice([16, 32, 64]), f, t, t, t, t, t, t, f, t, f, f)))
    if k == 2:
        return ('#include <stdint.h>\n/* Number of bits set in x (Kernighan\'s method). */\n'
                'static int popcount%d(uint%d_t x)\n{\n    int n = 0;\n    while (x) {\n'
                '        x &= x - 1;\n        n++;\n    }\n    return n;\n}' %
                ((lambda b: (b, b))(r.choice([8, 16, 32, 64]))))
    if k == 3:
        lo, hi = sorted(r.sample(range(-50, 200), 2))
        return ('/* Clamps v to [%d, %d] and maps it linearly onto [0, 1]. */\n'
                'static float normalize_%s(float v)\n{\n    const float lo = %d.0f, hi = %d.0f;\n'
                '    if (v < lo)\n        v = lo;\n    if (v > hi)\n        v = hi;\n'
                '    return (v - lo) / (hi - lo);\n}' % (lo, hi, f, lo, hi))
    return ('#include <stdio.h>\nint main(int argc, char **argv)\n{\n    if (argc != 2) {\n'
            '        fprintf(stderr, "usage: %%s FILE\\n", argv[0]);\n        return 2;\n    }\n'
            '    FILE *f = fopen(argv[1], "rb");\n    if (!f) {\n        perror(argv[1]);\n'
            '        return 1;\n    }\n    long n = 0;\n    int c;\n    while ((c = fgetc(f)) != EOF)\n'
            '        n += c == \'%s\';\n    fclose(f);\n    printf("%%ld\\n", n);\n    return 0;\n}' %
            r.choice(["\\n", ",", ";", " "]))


def js_code(r):
    t, f = r.choice(THINGS), r.choice(FIELDS)
    k = r.below(4)
    if k == 0:
        return ('async function fetch%ss(baseUrl, page = 1) {\n'
                '  const res = await fetch(`${baseUrl}/%ss?page=${page}&limit=%d`);\n'
                '  if (!res.ok) {\n    throw new Error(`request failed: ${res.status} ${res.statusText}`);\n  }\n'
                '  const body = await res.json();\n  return body.items.map((x) => ({ ...x, %s: Number(x.%s) }));\n}' %
                (cap(t), t, r.choice([20, 50, 100]), f, f))
    if k == 1:
        return ('const %ss = [\n%s\n];\nconst total = %ss.reduce((sum, x) => sum + x.%s, 0);\n'
                'const top = [...%ss].sort((a, b) => b.%s - a.%s).slice(0, 3);\n'
                'console.log(`total ${total}, top: ${top.map((x) => x.id).join(", ")}`);' %
                (t, ",\n".join("  { id: \"%s%d\", %s: %d }" % (t[0], i, f, r.randint(1, 500))
                               for i in range(r.randint(3, 6))), t, f, t, f, f))
    if k == 2:
        return ('class %sQueue {\n  #items = [];\n  constructor(limit = %d) {\n    this.limit = limit;\n  }\n'
                '  push(item) {\n    if (this.#items.length >= this.limit) {\n      this.#items.shift();\n    }\n'
                '    this.#items.push(item);\n  }\n  get size() {\n    return this.#items.length;\n  }\n'
                '  latest(n = 1) {\n    return this.#items.slice(-n);\n  }\n}' % (cap(t), r.randint(8, 256)))
    return ('function throttle(fn, ms = %d) {\n  let last = 0;\n  return (...args) => {\n'
            '    const now = Date.now();\n    if (now - last >= ms) {\n      last = now;\n      fn(...args);\n    }\n  };\n}\n'
            'window.addEventListener("scroll", throttle(() => console.log(window.scrollY)));' %
            r.choice([50, 100, 200, 250]))


def rust_code(r):
    t, f = r.choice(THINGS), r.choice(FIELDS)
    if r.chance(0.5):
        return ('#[derive(Debug, Clone, PartialEq)]\npub struct %s {\n    pub id: u32,\n    pub %s: f64,\n}\n'
                'impl %s {\n    pub fn new(id: u32, %s: f64) -> Self {\n        Self { id, %s }\n    }\n'
                '    pub fn exceeds(&self, limit: f64) -> bool {\n        self.%s > limit\n    }\n}\n'
                'fn main() {\n    let all = vec![%s];\n'
                '    let over: Vec<u32> = all.iter().filter(|x| x.exceeds(%d.0)).map(|x| x.id).collect();\n'
                '    println!("{} of {} over the limit: {:?}", over.len(), all.len(), over);\n}' %
                (cap(t), f, cap(t), f, f, f,
                 ", ".join("%s::new(%d, %d.0)" % (cap(t), i, r.randint(1, 99)) for i in range(1, r.randint(3, 6))),
                 r.randint(10, 80)))
    return ('use std::fs;\nuse std::io;\n/// Reads a file of one number per line and returns their mean.\n'
            'fn mean_of(path: &str) -> io::Result<Option<f64>> {\n    let text = fs::read_to_string(path)?;\n'
            '    let values: Vec<f64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();\n'
            '    if values.is_empty() {\n        return Ok(None);\n    }\n'
            '    Ok(Some(values.iter().sum::<f64>() / values.len() as f64))\n}\n'
            'fn main() {\n    match mean_of("%ss.txt") {\n        Ok(Some(m)) => println!("mean %s: {m:.3}"),\n'
            '        Ok(None) => println!("no numbers"),\n        Err(e) => eprintln!("cannot read: {e}"),\n    }\n}' % (f, f))


def go_code(r):
    t, f = r.choice(THINGS), r.choice(FIELDS)
    if r.chance(0.5):
        return ('package main\nimport (\n\t"fmt"\n\t"sync"\n)\n'
                'func worker(id int, jobs <-chan int, results chan<- int, wg *sync.WaitGroup) {\n'
                '\tdefer wg.Done()\n\tfor j := range jobs {\n\t\tresults <- j * %d\n\t}\n}\n'
                'func main() {\n\tjobs, results := make(chan int, %d), make(chan int, %d)\n'
                '\tvar wg sync.WaitGroup\n\tfor w := 1; w <= %d; w++ {\n\t\twg.Add(1)\n'
                '\t\tgo worker(w, jobs, results, &wg)\n\t}\n\tfor j := 1; j <= %d; j++ {\n\t\tjobs <- j\n\t}\n'
                '\tclose(jobs)\n\twg.Wait()\n\tclose(results)\n\tsum := 0\n\tfor v := range results {\n'
                '\t\tsum += v\n\t}\n\tfmt.Println("sum:", sum)\n}' %
                (r.randint(2, 9), 64, 64, r.randint(2, 8), r.randint(10, 60)))
    return ('package %s\nimport (\n\t"encoding/json"\n\t"net/http"\n)\n'
            'type %s struct {\n\tID    int     `json:"id"`\n\t%s float64 `json:"%s"`\n}\n'
            'func handle%s(w http.ResponseWriter, r *http.Request) {\n'
            '\tif r.Method != http.MethodGet {\n\t\thttp.Error(w, "method not allowed", http.StatusMethodNotAllowed)\n\t\treturn\n\t}\n'
            '\titems := []%s{{ID: 1, %s: %d}, {ID: 2, %s: %d}}\n'
            '\tw.Header().Set("Content-Type", "application/json")\n\tjson.NewEncoder(w).Encode(items)\n}' %
            (t, cap(t), cap(f), f, cap(t) + "s", cap(t), cap(f), r.randint(1, 99), cap(f), r.randint(1, 99)))


def sql_code(r):
    t, f = r.choice(THINGS), r.choice(FIELDS)
    rows = []
    for i in range(r.randint(3, 7)):
        rows.append("(%d, '%s', %d.%02d, '20%02d-%02d-%02d')" %
                    (i + 1, r.choice(TOWN_A) + r.choice(TOWN_B), r.randint(1, 999), r.below(100),
                     r.randint(18, 25), r.randint(1, 12), r.randint(1, 28)))
    return ('CREATE TABLE %ss (\n    id INTEGER PRIMARY KEY,\n    place TEXT NOT NULL,\n'
            '    %s NUMERIC(8, 2) NOT NULL CHECK (%s >= 0),\n    recorded_on DATE NOT NULL\n);\n'
            'INSERT INTO %ss (id, place, %s, recorded_on) VALUES\n    %s;\n'
            'SELECT place, COUNT(*) AS n, AVG(%s) AS mean_%s, MAX(%s) AS max_%s\nFROM %ss\n'
            'WHERE recorded_on >= DATE \'20%02d-01-01\'\nGROUP BY place\nHAVING COUNT(*) >= 1\n'
            'ORDER BY mean_%s DESC;' %
            (t, f, f, t, f, ",\n    ".join(rows), f, f, f, f, t, r.randint(18, 24), f))


def shell_code(r):
    d = r.choice(["photos", "reports", "backups", "logs", "exports", "scans"])
    if r.chance(0.5):
        return ('#!/bin/sh\n# Keeps the newest %d archives of %s and deletes older ones.\nset -eu\n'
                'dir=${1:-/srv/%s}\nkeep=%d\ncd "$dir"\n'
                'ls -1t -- *.tar.gz 2>/dev/null | tail -n +$((keep + 1)) | while read -r f; do\n'
                '    echo "removing $f"\n    rm -f -- "$f"\ndone' % ((lambda k: (k, d, d, k))(r.randint(3, 14))))
    return ('#!/usr/bin/env bash\nset -euo pipefail\nsrc="$HOME/%s"\ndest="/mnt/backup/%s-$(date +%%Y%%m%%d)"\n'
            'mkdir -p "$dest"\nrsync -a --delete --exclude \'*.tmp\' "$src/" "$dest/"\n'
            'count=$(find "$dest" -type f | wc -l)\necho "copied $count files to $dest"' % (d, d))


def html_code(r):
    t = r.choice(THINGS)
    items = r.sample(["Home", "About", "Prices", "Contact", "Blog", "Help", "Shop"], 4)
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n  <title>%s list</title>\n'
            '  <style>\n    body { font-family: sans-serif; margin: 2rem; max-width: %drem; }\n'
            '    nav a { margin-right: 1rem; color: #%06x; }\n  </style>\n</head>\n<body>\n  <nav>%s</nav>\n'
            '  <h1>%ss</h1>\n  <ul id="%ss"></ul>\n</body>\n</html>' %
            (cap(t), r.choice([40, 48, 60]), r.below(0xffffff),
             "".join('<a href="/%s">%s</a>' % (x.lower(), x) for x in items), cap(t), t))


# --- lists, tables, numbers ------------------------------------------------------------

GROCERIES = [("oat milk", 1.45), ("eggs, box of 6", 2.30), ("rye bread", 2.85),
             ("apples, 1 kg", 2.10), ("coffee beans, 250 g", 5.90), ("rice, 1 kg", 1.95),
             ("tinned tomatoes", 0.89), ("cheddar, 200 g", 2.75), ("carrots, 1 kg", 0.99),
             ("olive oil, 500 ml", 6.40), ("yoghurt", 1.20), ("lentils, 500 g", 1.60),
             ("bananas", 1.35), ("washing-up liquid", 1.80), ("pasta, 500 g", 1.10),
             ("onions, 1 kg", 1.25), ("butter, 250 g", 2.45), ("tea, 80 bags", 3.20)]


def shopping_list(r):
    items = r.sample(GROCERIES, r.randint(4, 9))
    total = 0.0
    out = ["Shopping, %s:" % r.choice(DAYS)]
    for name, price in items:
        q = r.choice([1, 1, 1, 2, 2, 3])
        total += q * price
        out.append("- %d x %s @ %s = %s" % (q, name, money(price), money(q * price)))
    out.append("Total: %s (budget %d, %s left)" %
               (money(total), (int(total) // 10 + 1) * 10,
                money((int(total) // 10 + 1) * 10 - total)))
    return "\n".join(out)


def checklist(r):
    what = r.choice([
        ("Before a long bike ride", ["pump the tyres to the pressure on the sidewall",
                                     "check that both brakes stop the wheel firmly",
                                     "oil the chain and wipe off the excess",
                                     "pack a spare tube, levers and a small pump",
                                     "charge the lights", "fill two bottles of water",
                                     "tell someone the route"]),
        ("Closing the shop", ["count the till and write the total in the book",
                              "switch off the coffee machine", "lock the back door",
                              "take out the rubbish", "set the alarm", "turn the sign to closed",
                              "check the freezer temperature"]),
        ("Moving house", ["give notice to the landlord in writing",
                          "book the van at least two weeks ahead",
                          "change the address at the bank and the doctor's",
                          "read the meters on the last day and photograph them",
                          "pack a box of essentials: kettle, mugs, towels, chargers",
                          "label every box with the room it goes to"]),
        ("Camping weekend", ["tent, pegs and mallet", "sleeping bags and mats", "stove and fuel",
                             "matches in a waterproof bag", "first-aid kit", "head torches",
                             "rain jackets", "water filter", "map and compass"]),
        ("New laptop set-up", ["install updates before anything else", "turn on disk encryption",
                               "set up the password manager", "configure backups and test a restore",
                               "install the browser and sign in", "remove software you do not need"]),
    ])
    title, items = what
    picked = r.sample(items, r.randint(4, len(items)))
    done = set(r.sample(range(len(picked)), r.randint(0, len(picked) // 2)))
    return "%s:\n%s" % (title, "\n".join("[%s] %s" % ("x" if i in done else " ", x)
                                          for i, x in enumerate(picked)))


def sensor_table(r):
    station = "%s %d" % (r.choice(["Station", "Buoy", "Mast", "Site"]), r.randint(1, 99))
    t = r.uniform(-5, 25)
    h = r.uniform(40, 90)
    p = r.uniform(995, 1030)
    day, mo = r.randint(1, 20), r.randint(1, 12)
    out = ["%s, %02d.%02d., hourly readings" % (station, day, mo),
           "time,temp_c,humidity_pct,pressure_hpa,wind_ms"]
    hour = r.randint(0, 12)
    for i in range(r.randint(8, 16)):
        t += r.uniform(-1.2, 1.4)
        h = min(100, max(10, h + r.uniform(-4, 4)))
        p += r.uniform(-1.5, 1.5)
        out.append("%02d:00,%.1f,%d,%.1f,%.1f" % ((hour + i) % 24, t, round(h), p,
                                                r.uniform(0, 14)))
    return "\n".join(out)


def timetable(r):
    stops = r.sample([town(r) for _ in range(12)], r.randint(4, 8))
    start = r.randint(5 * 60, 20 * 60)
    out = ["Route %d, %s" % (r.randint(1, 99), r.choice(["weekdays", "Saturdays",
                                                         "Sundays and holidays", "daily"]))]
    t = start
    for i, s in enumerate(stops):
        if i:
            t += r.randint(4, 25)
        out.append("%s  %s" % (clock(t), s))
    out.append("Journey time %d min. Next departure %s." %
               (t - start, clock(start + r.choice([20, 30, 60]))))
    return "\n".join(out)


def ledger(r):
    bal = r.randint(200, 5000) + r.below(100) / 100
    out = ["Account statement, %s %d" % (r.choice(MONTHS), r.randint(2018, 2025)),
           "date | description | amount | balance",
           "01 | opening balance | | %s" % money(bal)]
    d = 1
    for _ in range(r.randint(5, 12)):
        d += r.randint(1, 3)
        if d > 28:
            break
        if r.chance(0.25):
            amt = r.randint(300, 3000) + r.below(100) / 100
            desc = r.choice(["salary", "refund", "transfer from savings", "invoice paid"])
        else:
            amt = -(r.randint(2, 300) + r.below(100) / 100)
            desc = r.choice(["groceries", "rent", "electricity", "phone", "train tickets",
                             "bookshop", "pharmacy", "insurance", "restaurant", "hardware"])
        bal += amt
        out.append("%02d | %s | %s%s | %s" % (d, desc, "+" if amt > 0 else "-",
                                              money(abs(amt)), money(bal)))
    out.append("closing balance: %s" % money(bal))
    return "\n".join(out)


def league_table(r):
    teams = r.sample([town(r) + " " + r.choice(["United", "Rovers", "Athletic", "FC", "Wanderers", "City"])
                      for _ in range(10)], r.randint(5, 8))
    rows = []
    for tm in teams:
        p = r.randint(8, 14)
        w = d = l = gf = ga = 0
        for _ in range(p):
            a, b = r.randint(0, 4), r.randint(0, 4)
            gf, ga = gf + a, ga + b
            w, d, l = w + (a > b), d + (a == b), l + (a < b)
        rows.append((3 * w + d, gf - ga, gf, tm, p, w, d, l, ga))
    rows.sort(key=lambda x: (-x[0], -x[1], -x[2], x[3]))
    out = ["pos team                    P  W  D  L  GF  GA  GD  Pts"]
    for i, (pts, gd, gf, tm, p, w, d, l, ga) in enumerate(rows):
        out.append("%2d  %-22s %2d %2d %2d %2d %3d %3d %+3d %4d" % (i + 1, tm, p, w, d, l, gf, ga, gd, pts))
    out.append("Three points for a win, one for a draw; ties split by goal difference, then goals scored.")
    return "\n".join(out)


def gcd(a, b):
    while b:
        a, b = b, a % b
    return a


def math_problem(r):
    k = r.below(7)
    if k == 0:
        a, b = r.randint(12, 999), r.randint(12, 999)
        return ("Problem: compute %d x %d.\nSolution: %d x %d = %d x %d + %d x %d = %d + %d = %d." %
                (a, b, a, b, a, b - b % 10, a, b % 10, a * (b - b % 10), a * (b % 10), a * b))
    if k == 1:
        p, x = r.randint(3, 95), r.randint(20, 5000)
        return ("Problem: what is %d%% of %d?\nSolution: %d/100 x %d = %g." %
                (p, x, p, x, p * x / 100))
    if k == 2:
        a, b, c, d = r.randint(1, 9), r.randint(2, 12), r.randint(1, 9), r.randint(2, 12)
        n, m = a * d + c * b, b * d
        g = gcd(n, m)
        return ("Problem: add %d/%d and %d/%d.\nSolution: the common denominator is %d x %d = %d, so "
                "%d/%d + %d/%d = %d/%d + %d/%d = %d/%d%s." %
                (a, b, c, d, b, d, m, a, b, c, d, a * d, m, c * b, m, n, m,
                 "" if g == 1 else " = %d/%d" % (n // g, m // g)))
    if k == 3:
        a, x, b = r.randint(2, 12), r.randint(-20, 20), r.randint(-50, 50)
        c = a * x + b
        return ("Problem: solve %dx %s %d = %d.\nSolution: %dx = %d %s %d = %d, so x = %d/%d = %d."
                % (a, "+" if b >= 0 else "-", abs(b), c, a, c, "-" if b >= 0 else "+", abs(b),
                   c - b, c - b, a, x))
    if k == 4:
        w, h = r.randint(2, 40), r.randint(2, 40)
        return ("Problem: a rectangular room is %d m by %d m. What are its area and perimeter?\n"
                "Solution: area = %d x %d = %d square metres; perimeter = 2 x (%d + %d) = %d metres." %
                (w, h, w, h, w * h, w, h, 2 * (w + h)))
    if k == 5:
        p, rate, n = r.randint(5, 200) * 100, r.choice([1.5, 2, 2.5, 3, 4, 5]), r.randint(2, 10)
        return ("Problem: %d is invested at %g%% a year, compounded yearly. What is it worth after %d years?\n"
                "Solution: %d x %.4f^%d = %d x %.4f = %s." %
                (p, rate, n, p, 1 + rate / 100, n, p, (1 + rate / 100) ** n,
                 money(p * (1 + rate / 100) ** n)))
    nums = [r.randint(1, 99) for _ in range(r.randint(5, 11))]
    s = sorted(nums)
    n = len(s)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return ("Problem: find the mean and median of %s.\nSolution: sorted, the values are %s. "
            "The sum is %d over %d values, so the mean is %.2f; the median is %g." %
            (", ".join(map(str, nums)), ", ".join(map(str, s)), sum(s), n, sum(s) / n, med))


def number_facts(r):
    k = r.below(4)
    if k == 0:
        n = r.randint(2, 19)
        return "Multiplication table of %d: %s." % (n, ", ".join("%d x %d = %d" % (n, i, n * i) for i in range(1, 13)))
    if k == 1:
        a, b = 0, 1
        seq = []
        for _ in range(r.randint(15, 30)):
            seq.append(a)
            a, b = b, a + b
        return "The first %d Fibonacci numbers: %s." % (len(seq), ", ".join(map(str, seq)))
    if k == 2:
        n = r.randint(1, 60)
        return ("Powers of two from 2^%d: %s." %
                (n, ", ".join("%d" % (1 << i) for i in range(n, n + r.randint(5, 10)))))
    y = r.randint(1900, 2030)
    leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
    why = "%d is not divisible by 4" % y
    if y % 4 == 0:
        why = "%d is divisible by 4 but not by 100" % y
    if y % 100 == 0:
        why = "%d is divisible by 100 and %s by 400" % (y, "also" if y % 400 == 0 else "not")
    return ("Is %d a leap year? %s, so it %s: it has %d days." %
            (y, why, "is" if leap else "is not", 366 if leap else 365))


# --- letters, notes, news, reviews ----------------------------------------------------

def letter(r):
    (a, _, _), (b, _, _) = person(r), person(r)
    t = town(r)
    body = r.sample([
        "Thank you for the parcel; the %s arrived safely and is already in use." % r.choice(OBJECTS).split(" ", 1)[1],
        "The weather here has been %s, so the garden is either very happy or very confused." %
        r.choice(["wet and mild", "dry and windy", "cold and bright", "hot and still"]),
        "I have started going to the evening class at %s on %ss. We are learning to %s." %
        (r.choice(PLACES), r.choice(DAYS), r.choice(["make furniture", "speak Portuguese",
                                                       "draw faces", "repair clocks", "bake bread"])),
        (lambda who: "%s sends %s love and says the %s is finally fixed." %
         (who[0], who[1]["hers"], r.choice(["roof", "car", "boiler", "fence"])))(person(r)),
        "Do you remember the bench by %s? They have painted it %s." % (r.choice(RIVERS), r.choice(COLORS)),
        "I found the recipe for %s you asked about; it is on a card inside this letter." % r.choice(FOODS),
        "Work is busy but pleasant. We finished the big project %d days early." % r.randint(1, 12),
        "If you come in %s, the spare room is yours for as long as you like." % r.choice(MONTHS),
    ], r.randint(3, 5))
    return "%s, %d %s\nDear %s,\n%s\n%s,\n%s" % (
        t, r.randint(1, 28), r.choice(MONTHS), b, " ".join(body),
        r.choice(["With love", "Warm wishes", "All the best", "Yours", "See you soon"]), a)


def email(r):
    (a, _, _), (b, _, _) = person(r), person(r)
    sa = r.choice(SURNAMES)
    topic = r.choice([
        ("Meeting moved to %s" % r.choice(DAYS),
         "The review meeting is moved to %s at %s in room %d, because the projector in the usual room is being replaced. The agenda is unchanged." %
         (r.choice(DAYS), clock(r.randint(9, 16) * 60 + r.choice([0, 30])), r.randint(100, 450))),
        ("Invoice %d-%04d" % (r.randint(2019, 2025), r.randint(1, 9999)),
         "Please find attached the invoice for %s. The amount of %s is due within %d days; bank details are on the second page." %
         (r.choice(["the October work", "the workshop", "the translation", "the delivery"]),
          money(r.uniform(80, 4000)), r.choice([14, 30, 60]))),
        ("Server maintenance on %s night" % r.choice(DAYS),
         "The file server will be offline from %s to %s for updates. Save your work before you leave; anything open at that time may be lost." %
         (clock(r.randint(20, 23) * 60), clock(r.randint(1, 5) * 60))),
        ("Lost and found",
         "Someone left %s in the kitchen on the second floor. It is now at reception." % r.choice(OBJECTS)),
        ("Holiday cover",
         "I am away from %d to %d %s. %s will cover urgent requests; everything else can wait until I am back." %
         ((lambda x: (x, x + r.randint(3, 14)))(r.randint(1, 14)) + (r.choice(MONTHS), b))),
    ])
    return "From: %s %s\nTo: team\nSubject: %s\nHello everyone,\n%s\nThanks,\n%s" % (
        a, sa, topic[0], topic[1], a)


def news(r):
    t = town(r)
    k = r.below(4)
    if k == 0:
        n = r.randint(40, 900)
        return ("%s opens new footbridge. After %d months of work, the footbridge over %s in %s opened on %s. "
                "The bridge is %d metres long and cost %s million, %d percent more than planned, "
                "mostly because of the wet winter. About %d people crossed it on the first day. "
                "\"It saves me twenty minutes every morning,\" said one cyclist." %
                (t, r.randint(8, 30), r.choice(RIVERS), t, r.choice(DAYS), n // 4 + 20,
                 "%.1f" % r.uniform(1.2, 9.5), r.randint(3, 35), n * 3))
    if k == 1:
        return ("Library extends opening hours. From %d %s, the public library in %s will open until %s on weekdays "
                "and from %s on Saturdays. Visits rose by %d percent last year, and the reading room is often full by noon. "
                "The library also lends tools, board games and, since last spring, %d bicycles." %
                (r.randint(1, 28), r.choice(MONTHS), t, clock(r.choice([19, 20, 21]) * 60),
                 clock(r.choice([8, 9, 10]) * 60), r.randint(5, 40), r.randint(4, 30)))
    if k == 2:
        w, l = r.randint(1, 5), r.randint(0, 4)
        return ("%s beat %s %d-%d at home on %s. After a quiet first half, %s scored twice in ten minutes. "
                "The crowd of %s was the largest of the season. The next match is away, on %d %s." %
                (t, town(r), max(w, l + 1), l, r.choice(DAYS), r.choice(MEN + WOMEN),
                 "{:,}".format(r.randint(800, 24000)), r.randint(1, 28), r.choice(MONTHS)))
    return ("Weather for %s and the coast: %s. Highs of %d C, lows of %d C. Wind %s, %d to %d km/h. "
            "Tomorrow: %s." %
            (t, r.choice(["sunny spells and the odd shower", "cloudy with rain spreading from the west",
                          "dry and bright after early fog", "heavy showers, some with thunder"]),
             *(lambda lo: (lo + r.randint(4, 12), lo))(r.randint(-3, 15)), r.choice(["northwesterly", "southerly", "easterly", "variable"]),
             r.randint(5, 20), r.randint(21, 60), r.choice(["much the same", "colder, with sleet on high ground",
                                                              "warmer and drier", "windy at first, calming later"])))


REVIEWED = [
    ("the bakery on %s Street", ["friendly staff", "good value", "fresh bread every morning", "generous portions"],
     ["slow service at lunchtime", "a long queue on Saturdays", "few places to sit"]),
    ("this kettle", ["boils quickly", "quiet", "easy to clean"],
     ["the lid feels flimsy", "the handle gets warm", "expensive for what it is"]),
    ("the night train", ["clean cabins", "friendly staff", "arrives on time"],
     ["thin walls", "the restaurant car closes early", "expensive for what it is"]),
    ("the hotel by the harbour", ["a great view", "comfortable beds", "a good breakfast"],
     ["small rooms", "noisy at night", "slow lifts"]),
    ("these walking boots", ["waterproof", "comfortable from the first day", "solid build"],
     ["heavy", "the laces wear quickly", "run a little small"]),
    ("this board game", ["clear rules", "plays well with two", "beautiful artwork"],
     ["long set-up", "too many small pieces", "the box is too big for the shelf"]),
    ("this desk lamp", ["bright", "easy to adjust", "solid build"],
     ["the switch is hard to find in the dark", "the cable is short", "a faint hum"]),
]


def review(r):
    name, goods, bads = r.choice(REVIEWED)
    if "%s" in name:
        name = name % r.choice(TOWN_A)
    stars = r.randint(1, 5)
    return ("%d/5 for %s. Good: %s. Not so good: %s. %s" %
            (stars, name, join_and(r.sample(goods, 2)), join_and(r.sample(bads, r.randint(1, 2))),
             r.choice(["Would buy again." if stars >= 4 else "Would not buy again.",
                       "Fine for the price.",
                       "Not for me, but my partner loves it.", "Better than I expected.",
                       "Worse than the photos suggested." if stars <= 2 else "About what I expected."])))


def meeting_notes(r):
    ppl = ["%s. %s" % (r.choice(WOMEN + MEN)[0], r.choice(SURNAMES)) for _ in range(r.randint(3, 6))]
    d = r.randint(1, 28)
    items = r.sample([
        "budget for next quarter approved, with a reserve of %d percent" % r.randint(5, 15),
        "release moved to week %d; testing needs another week" % r.randint(2, 52),
        "new starter joins on the %d%s" % (d, "th" if 10 <= d % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")),
        "the office closes at %s on Fridays during the summer" % clock(r.choice([14, 15, 16]) * 60),
        "supplier contract to be renewed for %d years" % r.randint(1, 5),
        "backups to be tested monthly, first test on the %d%s" % (d, "th" if 10 <= d % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")),
        "customer survey: %d responses, average score %.1f of 5" % (r.randint(40, 900), r.uniform(3, 4.9)),
    ], r.randint(2, 4))
    acts = ["%s to %s by %s" % (p, a, r.choice(DAYS)) for p, a in zip(
        r.sample(ppl, 2), r.sample(["send the summary", "book the room", "update the plan",
                                    "ask the supplier for a quote", "check the figures"], 2))]
    return ("Meeting notes, %s %d. Present: %s. Decisions: %s. Actions: %s." %
            (r.choice(MONTHS), d, ", ".join(ppl), "; ".join(items), "; ".join(acts)))


def recipe(r):
    veg = r.sample(["onion", "carrot", "leek", "courgette", "pepper", "potato", "celery stick",
                    "sweet potato", "fennel bulb", "parsnip"], 3)
    herb = r.choice(["thyme", "rosemary", "parsley", "dill", "coriander", "bay leaves", "oregano"])
    n = r.randint(2, 6)
    mins = r.choice([20, 25, 30, 40, 45])
    dish = r.choice(["vegetable soup", "tray bake", "stew", "gratin", "frittata", "pasta bake"])
    return ("Recipe: %s %s for %d. You need %s, %s and %s, %d tablespoons of olive oil, %s, salt and pepper. "
            "Heat the oven to %d C. Chop the vegetables into pieces of about %d cm, toss them with the oil and "
            "season. Cook for %d minutes, stirring once halfway, until soft and browned at the edges. "
            "Add the %s at the end. Serves %d; keeps for %d days in the fridge." %
            (veg[0], dish, n, plural(r.randint(1, 3), veg[0]), plural(r.randint(1, 3), veg[1]),
             plural(r.randint(1, 3), veg[2]), r.randint(1, 4), herb, r.choice([180, 190, 200, 220]),
             r.randint(2, 4), mins, herb, n, r.randint(2, 4)))


def faq(r):
    prod = r.choice(["the app", "your account", "the membership card", "the booking system"])
    qs = r.sample([
        ("How do I reset my password?", "Use the link \"forgot password\" on the sign-in page; the email arrives within %d minutes." % r.randint(2, 10)),
        ("Can I change a booking?", "Yes, up to %d hours before the start, from the bookings page." % r.choice([12, 24, 48])),
        ("Is there a student discount?", "Students pay %d percent less with a valid card." % r.choice([10, 20, 25, 30])),
        ("Where is my data stored?", "On servers in the EU; backups are kept for %d days." % r.choice([7, 14, 30])),
        ("How do I cancel?", "From the settings page. You keep access until the end of the period you paid for."),
        ("Does it work offline?", "Partly: your saved items are available, but new searches need a connection."),
        ("Who do I contact for help?", "Write to the support address; we answer within %d working days." % r.randint(1, 3)),
    ], r.randint(3, 5))
    return "Frequently asked questions about %s\n%s" % (prod, "\n".join("Q: %s\nA: %s" % q for q in qs))


# --- other languages -------------------------------------------------------------------

def polish_minutes(n):
    if n == 1:
        return "minuta"
    if n % 10 in (2, 3, 4) and n % 100 not in (12, 13, 14):
        return "minuty"
    return "minut"


def polish_degrees(n):
    if n == 1:
        return "stopień"
    if n % 10 in (2, 3, 4) and n % 100 not in (12, 13, 14):
        return "stopnie"
    return "stopni"


def turkish_locative(hour):
    """The suffix of "at <hour>" ('de, 'da, 'te) after the hour's last word."""
    last = {1: "de", 2: "de", 3: "te", 4: "te", 5: "te", 6: "da", 7: "de", 8: "de", 9: "da"}
    if hour % 10:
        return last[hour % 10]
    return {10: "da", 20: "de"}[hour]


def russian_minutes(n):
    if n % 10 == 1 and n % 100 != 11:
        return "минута"
    if n % 10 in (2, 3, 4) and n % 100 not in (12, 13, 14):
        return "минуты"
    return "минут"


def lang_doc(r):
    h, mi = r.randint(6, 21), r.choice([0, 5, 10, 15, 20, 30, 40, 45, 50])
    d, n = r.randint(10, 95), r.randint(2, 12)
    t = r.randint(-5, 34)
    day = r.randint(1, 28)
    lang = r.below(19)
    fw, mw = r.choice(WOMEN), r.choice(MEN)
    if lang == 0:
        jours = ["lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"]
        mois = ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août",
                "septembre", "octobre", "novembre", "décembre"]
        s = ["Le %s, %s prend le train de %d h %02d pour Lyon. Le voyage dure %d minutes." % (r.choice(jours), fw, h, mi, d),
             "Aujourd'hui, il fait %d degrés et le ciel est %s." % (t, r.choice(["dégagé", "couvert", "gris"])),
             "Pour %d personnes, il faut %d grammes de farine, %d œufs et un demi-litre de lait." % (n, n * 60, max(2, n // 2)),
             "La réunion est reportée au %d %s à %d heures. Merci de confirmer votre présence." % (day, r.choice(mois), h),
             "À la bibliothèque, on peut emprunter jusqu'à %d livres pendant trois semaines." % n,
             "Le magasin ferme à %d h 30 le samedi et reste fermé le dimanche." % r.randint(17, 20),
             "Mon frère habite au %d%s étage d'un vieil immeuble près du port." % (n, "e" if n > 1 else "er")]
    elif lang == 1:
        tage = ["Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag"]
        monate = ["Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August",
                  "September", "Oktober", "November", "Dezember"]
        s = ["Am %s fährt %s um %d.%02d Uhr mit dem Zug nach Hamburg. Die Fahrt dauert %d Minuten." % (r.choice(tage), mw, h, mi, d),
             "Heute sind es %d Grad, und am Nachmittag soll es %s." % (t, r.choice(["regnen", "sonnig werden", "windig werden"])),
             "Für %d Personen braucht man %d Gramm Mehl, %d Eier und einen halben Liter Milch." % (n, n * 60, max(2, n // 2)),
             "Die Sitzung wird auf den %d. %s um %d Uhr verschoben. Bitte bestätigen Sie Ihre Teilnahme." % (day, r.choice(monate), h),
             "In der Stadtbibliothek kann man bis zu %d Bücher für drei Wochen ausleihen." % n,
             "Der Laden schließt samstags um %d.30 Uhr." % r.randint(17, 20),
             "Meine Schwester wohnt im %d. Stock eines alten Hauses am Hafen." % n]
    elif lang == 2:
        dias = ["lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo"]
        meses = ["enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto",
                 "septiembre", "octubre", "noviembre", "diciembre"]
        s = ["El %s, %s toma el tren de las %d:%02d a Valencia. El viaje dura %d minutos." % (r.choice(dias), fw, h, mi, d),
             "Hoy hace %d grados y por la tarde %s." % (t, r.choice(["va a llover", "saldrá el sol", "hará viento"])),
             "Para %d personas se necesitan %d gramos de harina, %d huevos y medio litro de leche." % (n, n * 60, max(2, n // 2)),
             "La reunión se aplaza al %d de %s a las %d. Por favor, confirmen su asistencia." % (day, r.choice(meses), h),
             "En la biblioteca se pueden tomar prestados hasta %d libros durante tres semanas." % n,
             "La tienda cierra a las %d:30 los sábados." % r.randint(17, 20)]
    elif lang == 3:
        giorni = ["lunedì", "martedì", "mercoledì", "giovedì", "venerdì", "sabato", "domenica"]
        s = ["Il %s %s prende il treno delle %d:%02d per Bologna. Il viaggio dura %d minuti." % (r.choice(giorni), mw, h, mi, d),
             "Oggi ci sono %d gradi e nel pomeriggio %s." % (t, r.choice(["pioverà", "ci sarà il sole", "tirerà vento"])),
             "Per %d persone servono %d grammi di farina, %d uova e mezzo litro di latte." % (n, n * 60, max(2, n // 2)),
             "In biblioteca si possono prendere in prestito fino a %d libri per tre settimane." % n,
             "Il negozio chiude alle %d:30 il sabato." % r.randint(17, 20)]
    elif lang == 4:
        s = ["Na %s, %s apanha o comboio das %d:%02d para o Porto. A viagem dura %d minutos." %
             (r.choice(["segunda-feira", "terça-feira", "quarta-feira", "quinta-feira", "sexta-feira"]), fw, h, mi, d),
             "Hoje estão %d graus e à tarde %s." % (t, r.choice(["vai chover", "vai fazer sol", "vai fazer vento"])),
             "Para %d pessoas são precisos %d gramas de farinha, %d ovos e meio litro de leite." % (n, n * 60, max(2, n // 2)),
             "Na biblioteca pode-se requisitar até %d livros durante três semanas." % n]
    elif lang == 5:
        s = ["Op %s neemt %s om %d.%02d uur de trein naar Utrecht. De reis duurt %d minuten." %
             (r.choice(["maandag", "dinsdag", "woensdag", "donderdag", "vrijdag"]), mw, h, mi, d),
             "Vandaag is het %d graden en vanmiddag %s." % (t, r.choice(["gaat het regenen", "schijnt de zon", "waait het hard"])),
             "In de bibliotheek kun je tot %d boeken voor drie weken lenen." % n,
             "De winkel sluit op zaterdag om %d.30 uur." % r.randint(17, 20)]
    elif lang == 6:
        s = ["På %s tar %s tåget till Göteborg klockan %d.%02d. Resan tar %d minuter." %
             (r.choice(["måndag", "tisdag", "onsdag", "torsdag", "fredag"]), fw, h, mi, d),
             "I dag är det %d grader och i eftermiddag %s." % (t, r.choice(["blir det regn", "skiner solen", "blåser det"])),
             "På biblioteket kan man låna upp till %d böcker i tre veckor." % n,
             "Affären stänger klockan %d.30 på lördagar." % r.randint(15, 18)]
    elif lang == 7:
        tp = max(t, 2)
        s = ["Pociąg do Krakowa odjeżdża o %d:%02d. Podróż trwa %d %s." % (h, mi, d, polish_minutes(d)),
             "Temperatura wynosi dzisiaj %d %s, a po południu %s." % (tp, polish_degrees(tp), r.choice(["będzie padać", "wyjdzie słońce", "będzie wiało"])),
             "W bibliotece można wypożyczyć książki na trzy tygodnie.",
             "Sklep jest otwarty od poniedziałku do soboty."]
    elif lang == 8:
        s = ["Поезд в Казань отправляется в %d:%02d. Поездка занимает %d %s." % (h, mi, d, russian_minutes(d)),
             "Сегодня %s, вечером %s." % (r.choice(["тепло", "холодно", "пасмурно", "солнечно"]), r.choice(["будет дождь", "будет ветер", "прояснится"])),
             "В библиотеке можно взять книги на три недели.",
             "Магазин открыт с понедельника по субботу.",
             "Мой брат живёт в старом доме у реки."]
    elif lang == 9:
        s = ["Το τρένο για τη Θεσσαλονίκη φεύγει στις %d:%02d." % (h, mi),
             "Η θερμοκρασία σήμερα είναι %d βαθμοί Κελσίου." % max(t, 2),
             "Η βιβλιοθήκη είναι ανοιχτή από Δευτέρα έως Παρασκευή.",
             "Το κατάστημα κλείνει στις %d:30 το Σάββατο." % r.randint(14, 20)]
    elif lang == 10:
        s = ["Tren saat %d.00'%s kalkıyor; yolculuk yaklaşık %d dakika sürüyor." % (h, turkish_locative(h), d),
             "Bugün hava %s." % r.choice(["güneşli", "bulutlu", "yağmurlu", "rüzgârlı"]),
             "Kütüphaneden üç hafta için kitap ödünç alabilirsiniz.",
             "Dükkân cumartesi günleri erken kapanıyor."]
    elif lang == 11:
        s = ["%s每天早上%d点起床，先喝一杯茶，然后骑自行车去上班。" % (fw, min(h, 9)),
             "今天的气温是%d度，下午可能有小雨。" % t,
             "这本书一共有%d页，我已经读了%d页。" % (n * 40, n * 13),
             "会议改到%d月%d日下午%d点，请大家准时参加。" % (r.randint(1, 12), day, r.randint(2, 5)),
             "图书馆每个人最多可以借%d本书，借期三周。" % n]
    elif lang == 12:
        s = ["%sさんは毎朝%d時に起きて、駅まで%d分歩きます。" % (mw, min(h, 9), n),
             "今日の気温は%d度で、午後は雨が降るかもしれません。" % t,
             "会議は%d月%d日の午後%d時からです。" % (r.randint(1, 12), day, r.randint(1, 5)),
             "この本は全部で%dページあります。" % (n * 40),
             "図書館では一人%d冊まで、三週間借りることができます。" % n]
    elif lang == 13:
        s = ["%s 씨는 매일 아침 %d시에 일어나서 %d분 동안 걷습니다." % (fw, min(h, 9), n * 5),
             "오늘 기온은 %d도이고 오후에는 비가 올 수도 있습니다." % t,
             "회의는 %d월 %d일 오후 %d시에 시작합니다." % (r.randint(1, 12), day, r.randint(1, 5)),
             "이 책은 모두 %d쪽입니다." % (n * 40)]
    elif lang == 14:
        s = ["يغادر القطار إلى الإسكندرية في الساعة %d:%02d." % (h, mi),
             "درجة الحرارة اليوم %d درجة مئوية." % max(t, 11),
             "تفتح المكتبة من الأحد إلى الخميس.",
             "يمكن استعارة الكتب لمدة ثلاثة أسابيع."]
    elif lang == 15:
        s = ["ट्रेन सुबह %d:%02d बजे रवाना होगी।" % (min(h, 11), mi),
             "आज का तापमान %d डिग्री सेल्सियस है।" % max(t, 2),
             "पुस्तकालय सोमवार से शनिवार तक खुला रहता है।",
             "बैठक %d तारीख को दोपहर %d बजे होगी।" % (day, r.randint(1, 4))]
    elif lang == 16:
        s = ["Tàu khởi hành lúc %d giờ %d phút." % (h, mi),
             "Hôm nay nhiệt độ là %d độ C." % t,
             "Thư viện mở cửa từ thứ Hai đến thứ Bảy.",
             "Cuộc họp sẽ bắt đầu lúc %d giờ chiều." % r.randint(1, 5)]
    elif lang == 17:
        s = ["Kereta berangkat pukul %d.%02d dan perjalanan memakan waktu %d menit." % (h, mi, d),
             "Suhu hari ini %d derajat Celsius." % max(t, 18),
             "Perpustakaan buka dari hari Senin sampai Sabtu.",
             "Rapat diadakan pada tanggal %d pukul %d.00." % (day, min(h, 16))]
    else:
        s = ["Juna lähtee Tampereelle kello %d.%02d." % (h, mi),
             "Tänään on %s." % r.choice(["aurinkoista", "pilvistä", "sateista", "tuulista"]),
             "Kirjastosta voi lainata kirjoja kolmeksi viikoksi.",
             "Kauppa on auki maanantaista lauantaihin."]
    return " ".join(r.sample(s, min(len(s), r.randint(3, 5))))


# --- documents that appear once --------------------------------------------------------

GUIDES = [
    ("How to bleed a radiator", [
        "Turn the heating off and wait until the radiators are cool.",
        "Put an old towel under the valve at the top corner of the radiator.",
        "Fit the radiator key to the square pin and turn it a quarter turn anticlockwise.",
        "You will hear air hissing out; when water starts to drip, close the valve again.",
        "Check the pressure gauge on the boiler and top it up if it has fallen below about 1 bar.",
        "Turn the heating back on and check that the radiator is now warm all over."]),
    ("How to plant tomatoes outdoors", [
        "Wait until there is no more risk of frost, usually late spring.",
        "Choose the sunniest, most sheltered spot you have.",
        "Dig a hole deeper than the pot and bury the stem up to the first leaves; it will grow roots along it.",
        "Push a cane in beside each plant and tie the stem loosely as it grows.",
        "Water at the base, not over the leaves, and water regularly rather than a lot at once.",
        "Pinch out the side shoots that grow between the main stem and the leaves."]),
    ("How to change a bicycle chain", [
        "Count the gears at the back: the new chain must match, for example a chain for 9 or 10 speeds.",
        "Shift onto the smallest sprocket at the back and the smallest ring at the front.",
        "Open the quick link, or push out a pin with a chain tool, and remove the old chain.",
        "Thread the new chain through the derailleur and around the largest ring and sprocket to find its length, plus two links.",
        "Shorten it with the chain tool and join it with the new quick link.",
        "Shift through all the gears slowly and check that nothing skips or rubs."]),
    ("How to test a backup", [
        "Pick a few files at random from the backup, including one large file and one from a deep folder.",
        "Restore them to a new folder, never over the originals.",
        "Open each restored file with the program that normally uses it.",
        "Compare the sizes and, if you can, the checksums with the originals.",
        "Write down the date and what you tested, so that you know when to do it again.",
        "If anything failed, fix the backup before you need it, not after."]),
    ("How to descale a kettle", [
        "Fill the kettle halfway with equal parts water and white vinegar, or use a solution of citric acid.",
        "Bring it to the boil, switch it off and leave it for an hour.",
        "Pour the solution away and scrub any remaining scale with a soft brush.",
        "Rinse well, then boil a full kettle of clean water and throw it away.",
        "Repeat every month or two if you live in a hard-water area."]),
    ("How to write a good bug report", [
        "Say what you did, step by step, starting from a clean state.",
        "Say what you expected to happen and what happened instead.",
        "Include the exact error message, copied rather than retyped.",
        "Give the version of the program and of the operating system.",
        "Attach the smallest input that still shows the problem.",
        "Report one problem per report."]),
    ("How to make a simple budget", [
        "Write down your income for the month after tax.",
        "List the fixed costs: rent, energy, insurance, phone, transport.",
        "Estimate the variable costs from last month's statements: food, clothes, going out.",
        "Subtract both from the income; decide what part of the rest goes into savings first.",
        "Check at the end of each week how you are doing, and adjust the next month's plan."]),
    ("How to prepare for a job interview", [
        "Read about the organisation and what the team does.",
        "Prepare three short stories from your own work that show problems you solved.",
        "Practise answering out loud, ideally with a friend.",
        "Prepare two or three questions of your own about the job.",
        "Plan the journey so that you arrive ten minutes early, or test your camera and microphone for a video call."]),
]


def once_docs():
    docs = []
    for title, steps in GUIDES:
        docs.append(title + ".\n" + "\n".join("%d. %s" % (i + 1, s) for i, s in enumerate(steps)))
    for c in sorted(CONCEPTS):
        docs.append("User: What is %s?\nAssistant: %s" % (c, CONCEPTS[c]))
    for q, a in CODE_QA:
        docs.append("User: %s\nAssistant: %s" % (q, a))
    return docs


# --- the whole text --------------------------------------------------------------------

GENERATORS = [  # (weight, generator)
    (18, story), (6, fable), (6, kids_story), (5, diary),
    (8, chat), (3, schedule_chat),
    (4, manual), (3, api_doc), (2, changelog), (2, access_log), (2, app_log), (2, config_file),
    (4, py_code), (3, c_code), (3, js_code), (2, rust_code), (2, go_code), (2, sql_code),
    (1, shell_code), (1, html_code),
    (3, shopping_list), (2, checklist), (2, sensor_table), (2, timetable), (2, ledger),
    (2, league_table), (5, math_problem), (2, number_facts),
    (4, letter), (3, email), (4, news), (3, review), (2, meeting_notes), (2, recipe), (2, faq),
    (9, lang_doc),
]


def generate(target):
    r = Rng(SEED)
    total_w = sum(w for w, _ in GENERATORS)
    docs, seen, size = [], set(), 0
    once = once_docs()
    every = 40  # one of them after every 39 generated documents
    while size < target:
        if once and len(docs) % every == every - 1:
            doc = once.pop(0)
        else:
            x = r.below(total_w)
            for w, gen in GENERATORS:
                if x < w:
                    break
                x -= w
            doc = gen(r)
        if doc in seen:
            continue
        assert "\n\n" not in doc and doc == doc.strip(), gen.__name__
        seen.add(doc)
        docs.append(doc)
        size += len(doc.encode("utf-8")) + 2
    return docs + once


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=OUTPUT, help="where to write (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="compare with --out instead of writing it; exit 1 when it differs")
    args = ap.parse_args()
    with open(HANDWRITTEN, encoding="utf-8") as f:
        head = f.read().rstrip("\n") + "\n"
    budget = TARGET_BYTES - len(head.encode("utf-8"))
    text = head + "\n" + "\n\n".join(generate(budget)) + "\n"
    data = text.encode("utf-8")
    if args.check:
        try:
            with open(args.out, "rb") as f:
                same = f.read() == data
        except OSError:
            same = False
        if not same:
            print("%s: differs from what %s writes; run it to regenerate" %
                  (os.path.relpath(args.out), os.path.relpath(__file__)), file=sys.stderr)
            return 1
        return 0
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, args.out)
    print("%s: %d bytes" % (os.path.relpath(args.out), len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
