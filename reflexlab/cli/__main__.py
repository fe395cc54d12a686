"""`python -m reflexlab.cli …`: how `reflexlab record` starts the sim bridge as a child process."""

from reflexlab.cli import main

main()
