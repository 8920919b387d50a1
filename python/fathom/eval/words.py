"""Words for needle keys (RULER draws adjective-noun pairs from the wonderwords lists; these are
plain English words, so a key reads like one: "quiet-harbor")."""

ADJECTIVES = """
able ancient angry bitter black bold brave bright broad broken calm careful cheap clean clever
cold cool crisp curious damp dark dear deep dry dull eager early easy empty faint fair famous
fancy fast fierce firm flat fresh friendly gentle giant glad golden good grand gray great green
happy hard heavy hidden high hollow honest hot huge humble icy jolly kind large late lazy light
little lively lonely long loud lucky mad major merry mild modern narrow neat new nice noble odd
old orange pale patient plain polite poor proud pure purple quick quiet rapid rare raw red rich
rigid rough round royal rude sad safe salty sharp shiny short shy silent silver simple slow small
smooth soft solid sour spare steep sticky stiff strange strong sunny super sweet swift tall tame
tender thick thin tidy tiny tough tricky ugly vast violet warm weak wet white wide wild wise
witty wooden yellow young zealous
""".split()

NOUNS = """
anchor apple arrow autumn badge bakery banner barn basket beach bell bicycle blanket boat bottle
bridge brook bucket cabin camera candle canyon castle cattle cave cellar chair cherry circle
cliff clock cloud coast compass copper cottage crater crown curtain desert diamond dolphin door
dragon drum eagle engine falcon feather fence field forest fountain garden gate glacier hammer
harbor harvest helmet hill horizon island jacket kettle kitten ladder lagoon lantern lemon
library lighthouse lion marble market meadow mirror moon mountain needle ocean orchard otter
palace panther parrot pebble pencil pepper piano pillow planet pocket pond puzzle quarry rabbit
raven river rocket saddle sailor scarf shadow shelter shovel signal island spider spoon square
statue stone storm stream summer sunset table temple thunder tiger tower tractor train tunnel
turtle umbrella valley village violin wagon walnut window winter wizard wolf yard zebra
""".split()
