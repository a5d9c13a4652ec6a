from farm_cli import main

main()
