"""``python -m minitransformer``: the same as the installed ``minitransformer`` command."""
from minitransformer.console import console

if __name__ == "__main__":
    console()
