"""``python -m minitransformer``: the same as the installed ``minitransformer`` command."""
from minitransformer.cli.main import console

if __name__ == "__main__":
    console()
