"""prmkit.grading"""
