"""The commands: the omnidraft CLI, adapt (the whole online loop), doctor."""
