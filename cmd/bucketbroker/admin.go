package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/bucketbroker/bucketbroker/internal/broker"
)

func newAdminCommand() *cobra.Command {
	admin := &cobra.Command{
		Use:   "admin",
		Short: "Maintenance tasks for operators",
	}
	admin.AddCommand(newMigrateCommand())
	return admin
}

func newMigrateCommand() *cobra.Command {
	var store, dataDir string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the state store's schema, then exit",
		Long: `Create or upgrade the state store's schema, then exit.

serve migrates on start as well, and migrations are safe to run from several
replicas at once; run this on its own to upgrade the schema before rolling out
a new version, or to check that the store is reachable.`,
		Example: `  BUCKETBROKER_STORE='postgres://bucketbroker@db.internal/bucketbroker' bucketbroker admin migrate
  bucketbroker admin migrate --data-dir ./data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("store") {
				store = os.Getenv("BUCKETBROKER_STORE")
			}
			s, err := broker.OpenStore(cmd.Context(), store, dataDir)
			if err != nil {
				return err
			}
			if err := s.Close(); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "The store's schema is up to date.")
			return nil
		},
	}
	cmd.Flags().StringVar(&store, "store", "", "state store: a PostgreSQL DSN or a SQLite file (default <data-dir>/bucketbroker.db); also from BUCKETBROKER_STORE")
	cmd.Flags().StringVar(&dataDir, "data-dir", "./data", "folder of the default SQLite file")
	return cmd
}
