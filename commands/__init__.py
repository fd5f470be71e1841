"""The command groups of the authledger CLI; cli.py assembles them into one program."""
