app_name = "experiments"

urlpatterns: list = []
