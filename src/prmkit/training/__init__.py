"""prmkit.training"""
