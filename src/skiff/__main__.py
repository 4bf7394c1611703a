from skiff.cli import main

main()
