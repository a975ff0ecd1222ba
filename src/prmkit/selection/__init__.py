"""prmkit.selection"""
