"""Lightning wiring: trainer, loggers, callbacks, checkpoint loading."""
