"""prmkit.evaluation"""
