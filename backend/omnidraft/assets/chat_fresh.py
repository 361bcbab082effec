"""User messages for the ``chat-fresh`` prompt set: (language, message) of the kinds people send a local
assistant.

Written by hand for this benchmark (not taken from ShareGPT or any other corpus), so no drafter can have
trained on them.  They come in pairs of the same kind; the set holds out the first message of each pair
and streams the second.  Eight are in other languages (es, fr, de, zh): one of each language among the
held-out messages and one among the streamed ones.
"""

MESSAGES = (
    # explain a concept
    ("en", "Can you explain what a hash table is and why looking something up in one is usually so fast? "
           "I understand arrays and lists but not where the hashing comes in."),
    ("es", "¿Me puedes explicar qué es la inflación y por qué los bancos centrales suben los tipos de interés "
           "para frenarla? Lo he oído mil veces en las noticias pero nunca lo he entendido del todo."),
    # write an e-mail
    ("fr", "Peux-tu m'aider à écrire un e-mail poli à une collègue pour lui demander de décaler notre réunion "
           "de jeudi après-midi à vendredi matin ? J'ai un rendez-vous chez le médecin que je ne peux pas "
           "changer."),
    ("en", "Write a short email to my landlord. The heating in the flat has not worked since Monday, I already "
           "called twice and nobody came. I want to stay friendly but make clear it has to be fixed this week."),
    # plan a trip
    ("de", "Ich habe Mitte Oktober vier Tage in Lissabon. Kannst du mir einen Reiseplan machen? Ich mag "
           "Aussichtspunkte, gutes Essen und Museen, aber keine langen Schlangen, und ich gehe gern zu Fuß."),
    ("en", "Plan a two-day weekend in Kyoto for two people on a modest budget. We arrive Saturday morning by "
           "train and leave Sunday evening. We like temples and gardens but would also like one nice dinner."),
    # debug an error
    ("en", "I get this error and don't understand it:\n\n"
           "Traceback (most recent call last):\n"
           "  File \"report.py\", line 14, in <module>\n"
           "    total = sum(row[\"amount\"] for row in rows)\n"
           "TypeError: unsupported operand type(s) for +: 'int' and 'str'\n\n"
           "The rows come from csv.DictReader. What is wrong and how do I fix it?"),
    ("en", "My React component crashes with \"TypeError: Cannot read properties of undefined (reading 'map')\" "
           "on the first render. I fetch the list in useEffect and then call items.map(...) in the JSX. Why "
           "does this happen and what is the usual fix?"),
    # summarise a paragraph given inline
    ("en", "Summarise this in two sentences:\n\n"
           "The town council met on Tuesday to discuss the future of the old railway depot. After two hours "
           "of debate, members agreed to commission a study on turning the building into a market hall with "
           "space for local producers, while keeping part of it as a small museum. Residents who attended "
           "were mostly in favour, although several raised concerns about parking and about noise on market "
           "days. The study is expected to cost around 40,000 euros and to report back in the spring."),
    ("zh", "请用两三句话总结下面这段话：\n\n"
           "我们公司从下个月开始实行弹性工作制。员工可以在早上七点到十点之间任意时间上班，"
           "只要每天工作满八小时即可。每周三上午十点到十二点是全体员工必须在公司的时间，"
           "用来开例会和讨论项目。公司希望这样能减少通勤高峰带来的压力，"
           "同时也提醒大家提前在共享日历上登记自己的上下班时间。"),
    # compare two things
    ("en", "For a small web app with maybe a few hundred users, should I use SQLite or PostgreSQL? Please "
           "compare them on setup, backups, concurrency and what happens if the app grows."),
    ("en", "What are the practical differences between a Kindle and a tablet for someone who mostly reads "
           "novels in bed but sometimes wants to read comics or PDFs?"),
    # cooking
    ("es", "Tengo arroz, cuatro huevos, media cebolla, un calabacín y un poco de queso. ¿Qué puedo cocinar "
           "para cenar en menos de media hora? Somos dos personas."),
    ("en", "I have leftover roast chicken, some potatoes, carrots and a lemon. Give me a dinner idea that takes "
           "under 40 minutes and doesn't need an oven."),
    # write some code
    ("en", "Write a bash script that renames all .jpg files in the current folder to the date they were "
           "taken (YYYY-MM-DD_HHMMSS.jpg), using exiftool, and skips files that have no date."),
    ("en", "I have a table orders(id, customer_id, created_at, total). Write a SQL query that returns, for "
           "each customer, their number of orders and total spent in 2023, highest spender first."),
    # a learning plan
    ("zh", "我想在三个月内提高英语口语，但每天只有半个小时的时间。"
           "你能帮我制定一个具体的学习计划吗？"
           "我现在能看懂简单的文章，但是说话的时候很紧张。"),
    ("en", "I'm 35 and want to learn the piano from zero. I can practise 20 minutes a day on a digital "
           "keyboard. What should my first three months look like?"),
    # edit a text
    ("en", "Can you make this paragraph shorter and clearer without losing anything important? \"Due to the "
           "fact that the meeting room has been double-booked, we are going to be in a situation where we "
           "have to move the weekly team sync to the small kitchen area, at least for the time being, until "
           "such time as facilities is able to resolve the issue.\""),
    ("fr", "Corrige les fautes de ce texte et explique-moi brièvement les règles : \"Hier, je suis allé au "
           "marché et j'ai acheter des pommes. Les pommes que j'ai acheté était très bonne, mais ma sœur les a "
           "trouver trop sucrés.\""),
    # health and fitness
    ("en", "I've never run before. Can you give me an eight-week plan to get from zero to running 5 km "
           "without stopping, three times a week?"),
    ("de", "Ich sitze den ganzen Tag am Schreibtisch und habe oft Nackenschmerzen. Welche einfachen "
           "Dehnübungen kann ich in der Mittagspause machen, und wie oft sollte ich sie wiederholen?"),
    # personal finance
    ("en", "I take home 2,800 a month, rent is 1,050, and I'd like to save for a holiday and an emergency "
           "fund. Can you suggest a simple monthly budget?"),
    ("en", "What is the difference between an index fund and an ETF? Which one makes more sense if I want to "
           "invest 100 a month for the next 20 years?"),
    # something creative
    ("en", "Write a short, warm poem (eight lines or so) for a retirement card for a colleague who worked 30 "
           "years in the school library and loves gardening."),
    ("en", "Tell me a bedtime story for a five-year-old about a small robot who is afraid of the dark. It "
           "should take about three minutes to read aloud."),
    # tech support
    ("en", "My laptop fan has become really loud even when I'm only browsing. It's about four years old and "
           "runs Windows 11. What should I check before taking it to a repair shop?"),
    ("en", "I committed to the wrong branch in git and haven't pushed yet. How do I move that last commit to "
           "a new branch and remove it from the current one?"),
    # a little maths
    ("en", "If I roll two ordinary dice, what is the probability that the total is at least 9? Please show "
           "how you count it."),
    ("en", "A recipe for 6 people needs 450 g of flour, 3 eggs and 250 ml of milk. How much of each do I "
           "need for 4 people, and how do I handle the eggs?"),
    # advice at work
    ("en", "I have a salary review next week. I've taken on two new responsibilities this year. How should I "
           "prepare, and what should I say if they offer less than I hoped?"),
    ("en", "A colleague keeps interrupting people in meetings, including me. How can I bring this up with "
           "them in a way that doesn't start a conflict?"),
)
