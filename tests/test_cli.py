from prmkit.cli import main


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: prmkit" in capsys.readouterr().out
