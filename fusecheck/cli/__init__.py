"""The command line: the entry point, each command's arguments (none imports torch, so every -h answers at once), report paths, progress and the time limit."""
