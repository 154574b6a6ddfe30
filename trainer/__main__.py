from trainer.cli import run

run()
