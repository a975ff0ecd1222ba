"""prmkit.scoring"""
