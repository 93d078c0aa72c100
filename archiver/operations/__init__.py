"""What the commands do, apart from parsing arguments and printing: each returns data and
the CLI (or the console) prints it. Nothing here imports pyarrow until a command needs
rows (restore, verify)."""
