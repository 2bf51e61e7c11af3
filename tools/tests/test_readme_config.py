from strom.tools.dev import readme_config


def test_readme_configuration_table_is_current():
    text = readme_config.README.read_text(encoding="utf-8")
    assert readme_config.render(text) == text, "run: python -m strom.tools.dev.readme_config"
    for name in readme_config.BROKER_CONFIGS:
        assert f"`{name}`" in text
