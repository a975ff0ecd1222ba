"""prmkit: process supervision for step-by-step math reasoning."""

__version__ = "0.1.0"
